"""scripts/staged_src.py: equal trees share one staged copy (and so numba's cache), any change does not."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import staged_src  # noqa: E402


def _clone(root: Path, i: int) -> Path:
    src = root / "src"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / "pkg" / "k.py").write_text("x = 1\n")
    (src / "pkg" / "__pycache__" / "k.pyc").write_bytes(bytes([i]))  # never part of the tree
    (src / "pkg.egg-info").mkdir()
    (src / "pkg.egg-info" / "PKG-INFO").write_text(f"README of clone {i}\n")  # pip's build metadata
    os.utime(src / "pkg" / "k.py", (1e9 + 7 * i, 1e9 + 7 * i))
    return src


def test_two_clones_of_one_tree_share_a_staged_copy_and_its_numba_stamps(tmp_path):
    """numba names its cache folders by source path: equal content must land at one path (one mtime)."""
    clones = [_clone(tmp_path / name, i) for i, name in enumerate("ab")]
    cache = tmp_path / "cache"
    first, second = (staged_src.stage_source(src, cache) for src in clones)
    assert first == second
    assert (first / "pkg" / "k.py").stat().st_mtime == staged_src.STAGED_MTIME
    assert not (first / "pkg" / "__pycache__").exists()
    assert not (first / "pkg.egg-info").exists()  # a README change alone is no new tree
    (clones[1] / "pkg" / "k.py").write_text("x = 2\n")
    changed = staged_src.stage_source(clones[1], cache)
    assert changed != first and (changed / "pkg" / "k.py").read_text() == "x = 2\n"
    assert (first / "pkg" / "k.py").read_text() == "x = 1\n"  # a staged tree is never rewritten
    (clones[0] / "pkg" / "data.toml").write_text("a = 1\n")  # a new file, not only a changed one
    assert staged_src.stage_source(clones[0], cache) not in (first, changed)


def test_old_unused_trees_go_with_their_kernels(tmp_path):
    cache = tmp_path / "cache"
    src = _clone(tmp_path / "a", 0)
    old = staged_src.stage_source(src, cache)
    kernels = cache / "numba-host" / str(old).lstrip("/") / "pkg"
    kernels.mkdir(parents=True)
    (kernels / "k.f-1.py311.nbi").write_bytes(b"index")
    hour_ago = time.time() - staged_src.KEEP_UNUSED_S - 60
    os.utime(old, (hour_ago, hour_ago))
    (src / "pkg" / "k.py").write_text("x = 3\n")
    new = staged_src.stage_source(src, cache, keep=1)
    assert new.is_dir() and not old.exists() and not kernels.exists()
    (src / "pkg" / "k.py").write_text("x = 4\n")  # `new` was used just now: it stays
    assert staged_src.stage_source(src, cache, keep=1).is_dir() and new.is_dir()
