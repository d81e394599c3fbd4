"""The INT4 image of a checkpoint, cached by content hash so a second run does not quantize again.

Key: SHA-256 over each checkpoint file's SHA-256, the model config and ``FORMAT`` (bump it when the
quantization changes). A file's SHA-256 is remembered per (path, size, mtime_ns, inode) in
``files.json`` (git's stat cache): an unchanged file is not read again, a changed one is hashed
anew (as is one modified in the last 2 s, whose stat could repeat), so a changed checkpoint always
gets a new key and is re-quantized, never served stale.

Where: ``<checkpoint dir>/.npukit-int4/`` when that directory is writable, else
``$XDG_CACHE_HOME/npukit/int4`` (``~/.cache``); ``NPUKIT_INT4_CACHE`` overrides both, and ``off``
disables the cache. An entry is a directory of ``.npy`` arrays (memory-mapped on load) and a
``manifest.json`` written last, so a half-written entry is never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from npukit.targets.pccx.gemma3n_quant.store import Int4Matrix, Int4Store

FORMAT = "npukit-int4-v1"  # absmax INT4 per row (per group for the PLE table), BF16 vectors


def checkpoint_files(weights: Any) -> list[Path] | None:
    """The files a weights object reads from, or None (synthetic / in-memory weights: no cache)."""
    files = getattr(weights.source, "files", None)
    if not files:
        return None
    paths = [Path(getattr(f, "path", "")) for f in files]
    return paths if all(p.is_file() for p in paths) else None


def _root(files: list[Path]) -> Path | None:
    env = os.environ.get("NPUKIT_INT4_CACHE")
    if env:
        return None if env == "off" else Path(env)
    beside = files[0].parent / ".npukit-int4"
    if os.access(files[0].parent, os.W_OK):
        return beside
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "npukit" / "int4"


def _file_hash(path: Path, stats: dict[str, Any]) -> str:
    st = path.stat()
    sig = [st.st_size, st.st_mtime_ns, st.st_ino]
    known = stats.get(str(path.resolve()))
    if known and known["sig"] == sig:
        return known["sha256"]
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    if time.time_ns() - st.st_mtime_ns > 2_000_000_000:  # "racy" (just written): hash it again next time
        stats[str(path.resolve())] = {"sig": sig, "sha256": h.hexdigest()}
    return h.hexdigest()


def content_key(files: list[Path], config: Any, root: Path) -> str:
    index = root / "files.json"
    try:
        stats = json.loads(index.read_text())
    except (OSError, ValueError):
        stats = {}
    hashes = [_file_hash(p, stats) for p in files]
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".files.{os.getpid()}.json"
        tmp.write_text(json.dumps(stats))
        tmp.replace(index)
    except OSError:
        pass
    cfg = json.dumps(config.to_dict() if hasattr(config, "to_dict") else str(config), sort_keys=True,
                     default=str)
    return hashlib.sha256("\n".join([FORMAT, cfg, *hashes]).encode()).hexdigest()[:32]


def load_store(weights: Any) -> tuple[Int4Store, str]:
    """The weights' `Int4Store`, from the cache when this checkpoint was quantized before; and how
    ("cache hit", "quantized, cached", "quantized" when there is no cache)."""
    files = checkpoint_files(weights)
    root = _root(files) if files else None
    if root is None:
        return Int4Store(weights), "quantized"
    key = content_key(files, weights.config, root)
    entry = root / key
    store = _read(entry, weights)
    how = "cache hit"
    if store is None:
        store = Int4Store(weights)
        how = "quantized, cached" if _write(entry, store) else "quantized"
    store.content_key, store.cache_root = key, root  # the compiled-program cache keys on them
    return store, how


def _read(entry: Path, weights: Any) -> Int4Store | None:
    try:
        man = json.loads((entry / "manifest.json").read_text())
        if man.get("format") != FORMAT:
            return None
        mats = {}
        for i, (name, shape, group) in enumerate(man["mats"]):
            packed = np.load(entry / f"m{i}.packed.npy", mmap_mode="r")
            scale = np.load(entry / f"m{i}.scale.npy", mmap_mode="r")
            mats[name] = Int4Matrix(packed, scale, (int(shape[0]), int(shape[1])), group)
        vecs = {name: np.load(entry / f"v{i}.npy") for i, name in enumerate(man["vecs"])}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Int4Store.from_parts(weights.config, weights.origin, mats, vecs)


def _write(entry: Path, store: Int4Store) -> bool:
    """Write the quantized tensors (the padded twins are rebuilt on load); False when it cannot."""
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
        mats = [(n, m) for n, m in store.mats.items() if "@" not in n]
        for i, (_, m) in enumerate(mats):
            np.save(tmp / f"m{i}.packed.npy", np.ascontiguousarray(m.packed))
            np.save(tmp / f"m{i}.scale.npy", np.ascontiguousarray(m.scale))
        vecs = [n for n in store.vecs if "@" not in n]
        for i, n in enumerate(vecs):
            np.save(tmp / f"v{i}.npy", store.vecs[n])
        man = {"format": FORMAT, "mats": [(n, list(m.shape), m.group) for n, m in mats], "vecs": vecs}
        (tmp / "manifest.json").write_text(json.dumps(man))
        if entry.exists():
            shutil.rmtree(tmp, ignore_errors=True)
            return True
        tmp.rename(entry)
        return True
    except OSError:
        return False
