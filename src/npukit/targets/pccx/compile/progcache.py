"""Compiled pccx programs cached on disk, so a checkpoint seen before starts without lowering anew.

What: the driver's `Variant`s (a `Program` with its segments, patches and stats, the static host
inputs, the per-token recipes, the logits address) and the measured prefill limit, one file each.
A prefill chunk that did not fit L2 is remembered too (the driver then lowers T at once).

Key: SHA-256 over ``FORMAT``, the INT4 image's content key (`gemma3n_quant.cache`: checkpoint
files, config, quantization format), the compiler's fingerprint (the source of every module that
shapes a program, `fingerprint`), the hardware description (all its fields, canonical JSON), the
ISA profile, the KV format, the ring (max tokens, sink, base address) and the entry's own name (span
bucket, chunk length). A changed checkpoint, compiler, preset or override never finds an old entry.

Where: ``programs/`` in the INT4 cache's directory (beside the checkpoint, or
``$XDG_CACHE_HOME/npukit/int4``); ``NPUKIT_PROGRAM_CACHE=DIR`` puts it elsewhere, ``off`` disables
it (as does ``NPUKIT_INT4_CACHE=off``). Weights without files (synthetic) are never cached.

A file is a header line (``MAGIC``, the full key) and a pickle read by an unpickler that builds only
pccx dataclasses and enums, NumPy arrays and Counters. Written to a temporary file and renamed; a
missing, foreign, truncated or unreadable entry reads as a miss and is rebuilt, never an error.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import hashlib
import io
import json
import os
import pickle
import secrets
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import npukit
from npukit.sim.trace import gc_paused
from npukit.targets.pccx.compile.ir import CapacityError

FORMAT = "npukit-pccx-programs-v1"  # bump when the entries' layout changes
MAGIC = b"npukit pccx program\n"
MAX_ENTRIES = 512  # per directory; the oldest (least recently used) go first (entries are ~50 KB)
ENV = "NPUKIT_PROGRAM_CACHE"

# the source a compiled program depends on (relative to the npukit package)
FINGERPRINT_SOURCES = (
    "targets/pccx/compile/*.py", "targets/pccx/gemma3n_quant/*.py", "targets/pccx/driver.py",
    "targets/pccx/kv_ring.py", "targets/pccx/isa.py", "targets/pccx/memory.py",
    "targets/pccx/numerics.py", "targets/pccx/ops.py", "targets/pccx/hw.py", "compile/*.py",
    "isa/spec.py", "formats/int4.py", "models/gemma3n/config.py", "models/gemma3n/weights.py",
)


@functools.cache
def fingerprint() -> str:
    """SHA-256 of the compiler's own source (file names and bytes), once per process."""
    pkg = Path(npukit.__file__).parent
    h = hashlib.sha256()
    for pattern in FINGERPRINT_SOURCES:
        for path in sorted(pkg.glob(pattern)):
            h.update(f"{path.relative_to(pkg)}\0".encode())
            h.update(path.read_bytes())
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class Unfit:
    """A prefill chunk program that did not fit (its `CapacityError` message)."""

    message: str


_NUMPY = {"_frombuffer", "_reconstruct", "dtype", "ndarray", "scalar"}


class _Unpickler(pickle.Unpickler):
    """Builds pccx dataclasses and enums, NumPy arrays and Counters; refuses any other global."""

    def find_class(self, module: str, name: str) -> Any:
        if "." not in name:
            if module == "collections" and name == "Counter":
                return super().find_class(module, name)
            if module.split(".")[0] == "numpy" and name in _NUMPY:
                return super().find_class(module, name)
            if module.startswith("npukit.targets.pccx."):
                obj = super().find_class(module, name)
                if isinstance(obj, type) and obj.__module__ == module and (
                        dataclasses.is_dataclass(obj) or issubclass(obj, enum.Enum)):
                    return obj
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a program cache entry")


def _canonical(obj: Any) -> str:
    data = dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) else obj
    return json.dumps(data, sort_keys=True, default=repr, separators=(",", ":"))


class ProgramCache:
    """The program cache of one driver (its store, hardware, profile and KV ring at first use)."""

    def __init__(self, drv: Any) -> None:
        self.drv = drv
        self.hits = self.misses = self.writes = 0
        # the last `_where` answer: (its inputs but the hardware, a copy of the hardware, the answer);
        # the hardware's canonical JSON costs 0.1-0.4 ms a call, and a decode token asks a few times
        self._last: tuple[tuple, Any, tuple[Path, str]] | None = None

    def _where(self) -> tuple[Path, str] | None:
        """(directory, key prefix), or None when this driver's programs are not cached."""
        env = os.environ.get(ENV, "")
        drv = self.drv
        store = getattr(drv, "store", None)
        content = getattr(store, "content_key", None)
        if env == "off" or content is None or getattr(drv, "ring", None) is None:
            return None
        ring = drv.ring
        inputs = (env, content, fingerprint(), store.cache_root, drv.profile, drv.kv, ring.max_tokens,
                  ring.sink, drv.image.end)
        last = self._last
        if last is not None and last[0] == inputs and last[1] == drv.hw:  # (a changed field: new key)
            return last[2]
        root = Path(env) if env else store.cache_root / "programs"
        base = "\n".join([FORMAT, content, fingerprint(), _canonical(drv.hw), drv.profile, drv.kv,
                          str(ring.max_tokens), str(ring.sink), str(drv.image.end)])
        self._last = (inputs, copy.deepcopy(drv.hw), (root, base))
        return root, base

    @property
    def active(self) -> bool:
        """Whether this driver's entries are stored at all (a file-backed checkpoint, not switched off)."""
        return self._where() is not None

    def _path(self, name: tuple) -> tuple[Path, bytes] | None:
        where = self._where()
        if where is None:
            return None
        root, base = where
        digest = hashlib.sha256(f"{base}\n{name!r}".encode()).hexdigest()
        return root / f"{digest[:40]}.pkl", MAGIC + digest.encode() + b"\n"

    def get(self, name: tuple, kind: type | tuple[type, ...]) -> Any:
        """The entry ``name`` if it is stored and of type ``kind``; raises `CapacityError` for a chunk
        remembered as not fitting; None otherwise (not cached, missing, unreadable)."""
        at = self._path(name)
        if at is None:
            return None
        path, header = at
        try:
            with path.open("rb") as f:
                if f.read(len(header)) != header:
                    raise ValueError("foreign entry")
                with gc_paused():  # (tens of thousands of acyclic objects: each collection scans them)
                    value = _Unpickler(io.BytesIO(f.read())).load()
        except Exception:  # any unreadable entry (torn, foreign, classes since renamed) is a miss
            self.misses += 1
            return None
        with suppress(OSError):
            os.utime(path)  # recently used: pruned last
        if isinstance(value, Unfit):
            self.hits += 1
            raise CapacityError(value.message)
        if not isinstance(value, kind):
            self.misses += 1
            return None
        self.hits += 1
        return value

    def put(self, name: tuple, value: Any) -> bool:
        """Store ``value`` under ``name`` (temporary file, then rename); False when it cannot."""
        at = self._path(name)
        if at is None:
            return False
        path, header = at
        tmp = path.parent / f".tmp-{os.getpid()}-{secrets.token_hex(6)}"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tmp.open("xb") as f:  # (the umask's mode, as the INT4 entries)
                f.write(header)
                pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except (OSError, pickle.PicklingError, TypeError, AttributeError):
            with suppress(OSError):
                tmp.unlink(missing_ok=True)
            return False
        self.writes += 1
        _prune(path.parent)
        return True

    @contextmanager
    def remember_unfit(self, name: tuple):
        """Around lowering and compiling ``name``: a `CapacityError` is stored (then raised again)."""
        try:
            yield
        except CapacityError as exc:
            self.put(name, Unfit(str(exc)))
            raise


def _prune(root: Path) -> None:
    """Keep the ``MAX_ENTRIES`` most recently used entries of ``root`` (and no temporary file of a
    writer that died over an hour ago)."""
    with suppress(OSError):
        now = time.time_ns()
        files = []
        for p in root.iterdir():
            st = p.stat()
            if p.suffix == ".pkl":
                files.append((st.st_mtime_ns, p))
            elif p.name.startswith(".tmp-") and now - st.st_mtime_ns > 3600 * 10**9:
                p.unlink(missing_ok=True)
        for _, p in sorted(files, key=lambda f: f[0])[:max(0, len(files) - MAX_ENTRIES)]:
            p.unlink(missing_ok=True)
