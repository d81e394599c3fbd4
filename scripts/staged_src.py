"""A content-addressed copy of npukit's source tree, so that numba's disk cache survives fresh clones.

numba names a kernel's cache folder after its source file's directory (with ``NUMBA_CACHE_DIR``; else
the folder is the ``__pycache__`` beside the source) and stamps each entry with that file's content
hash (numba 0.68; npukit's `sim.numba_cache` adds the files and constants the kernel reaches). A
clean clone (CI) has a new path, so every kernel compiles again: minutes per CPU class in
tests/test_cpu_matrix.py, ten under aarch64 emulation in scripts/aarch64_smoke.py. Both run npukit
from ``<cache>/src/<hash of the whole tree>`` instead: the same tree lands at the same path (its
kernels come from the cache), and any change anywhere gives a new path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

SKIP_PARTS = {"__pycache__", ".npukit-int4"}  # not part of the source tree
# build metadata pip writes beside an editable install (PKG-INFO embeds the README: a docs-only change
# must not make a new tree and cost a cold compile)
SKIP_SUFFIXES = (".egg-info",)
# every staged file's mtime: numba 0.68 stamps by content, not mtime; one fixed stamp keeps two stagings
# of a tree identical to any tool that reads mtimes (numba's own hash memo among them)
STAGED_MTIME = 1_000_000_000
KEEP_UNUSED_S = 3600  # trees beyond ``keep`` are removed once unused this long


def _in_tree(rel: Path) -> bool:
    return not any(part in SKIP_PARTS or part.endswith(SKIP_SUFFIXES) for part in rel.parts)


def tree_files(src: Path) -> list[Path]:
    """The files of ``src`` that make up the tree (no bytecode, build metadata or INT4 images)."""
    return sorted(p for p in src.rglob("*") if p.is_file() and _in_tree(p.relative_to(src)))


def tree_digest(src: Path, files: list[Path]) -> str:
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.relative_to(src)}\0{hashlib.sha256(f.read_bytes()).hexdigest()}\0".encode())
    return digest.hexdigest()[:16]


def stage_source(src: Path, cache: Path, keep: int = 4) -> Path:
    """A copy of ``src`` at ``<cache>/src/<content hash>``, every file stamped `STAGED_MTIME`.

    Trees are immutable once made (concurrent runs share them: a partial copy is renamed into place).
    Beyond the ``keep`` most recently used, a tree unused for `KEEP_UNUSED_S` is removed with its
    kernels in every ``<cache>/numba-*`` folder."""
    files = tree_files(src)
    trees = cache / "src"
    target = trees / tree_digest(src, files)
    if not target.is_dir():
        tmp = trees / f"{target.name}.partial-{os.getpid()}"
        for f in files:
            dst = tmp / f.relative_to(src)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst)
            os.utime(dst, (STAGED_MTIME, STAGED_MTIME))
        try:
            tmp.rename(target)
        except OSError:  # another run staged the same tree first
            shutil.rmtree(tmp, ignore_errors=True)
    target.touch()  # its mtime says when it was last used
    old = sorted((p for p in trees.iterdir() if p.is_dir() and "." not in p.name),
                 key=lambda p: p.stat().st_mtime, reverse=True)[keep:]
    for tree in old:
        if time.time() - tree.stat().st_mtime > KEEP_UNUSED_S:
            shutil.rmtree(tree, ignore_errors=True)
            for nb in cache.glob("numba-*"):
                shutil.rmtree(nb / str(tree).lstrip("/"), ignore_errors=True)
    return target
