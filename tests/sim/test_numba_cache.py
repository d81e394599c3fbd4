"""numba's disk cache with `npukit.sim.numba_cache` installed: an edit of a callee in another file, or of a
constant imported from another module, reaches a caller whose own file did not change (numba's own
stamp, the caller's file hash, misses both: checked here too, so the test shows the gap it closes), and
an unchanged tree still loads every kernel from the cache. Each run is a fresh process, as a user's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CHILD = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    if sys.argv[2] == "on":
        from npukit.sim import numba_cache
        numba_cache.DependentStamp.roots = (sys.argv[1],)
        numba_cache.install()
    from kpkg import caller
    out = caller.run()
    print(json.dumps({"value": int(out), "hits": sum(caller.run.stats.cache_hits.values())}))
""")


def _write(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))
    st = path.stat()  # (a new mtime even within the filesystem's timestamp granularity)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def _tree(root: Path, value: int, scale: int) -> None:
    pkg = root / "kpkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    _write(pkg / "callee.py", f"""
        import numba as nb

        @nb.njit(cache=True)
        def value():
            return {value}
    """)
    _write(pkg / "consts.py", f"SCALE = {scale}\n")
    if not (pkg / "caller.py").exists():
        _write(pkg / "caller.py", """
            import numba as nb
            from kpkg import callee
            from kpkg.consts import SCALE

            @nb.njit(cache=True)
            def run():
                return callee.value() * SCALE
        """)


def _run(root: Path, cache: Path, mode: str) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    got = subprocess.run([sys.executable, "-c", CHILD, str(root), mode], env=env, capture_output=True,
                         text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["on", "off"])
def test_an_edit_outside_the_callers_file_reaches_it_only_with_the_stamp(tmp_path, mode):
    cache = tmp_path / "numba-cache"
    _tree(tmp_path, 1, 10)
    assert _run(tmp_path, cache, mode)["value"] == 10
    again = _run(tmp_path, cache, mode)
    assert again == {"value": 10, "hits": 1}  # an unchanged tree: loaded, not compiled
    _tree(tmp_path, 2, 10)  # the callee edited, the caller's file untouched
    edited = _run(tmp_path, cache, mode)["value"]
    _tree(tmp_path, 2, 100)  # a constant the caller imports edited
    scaled = _run(tmp_path, cache, mode)["value"]
    if mode == "on":
        assert (edited, scaled) == (20, 200)
        assert _run(tmp_path, cache, mode) == {"value": 200, "hits": 1}  # and cached again
    else:  # numba alone: the caller's old code (the gap `numba_cache` closes)
        assert (edited, scaled) == (10, 10)


def test_a_factory_made_intrinsic_is_stamped_with_what_its_closure_holds() -> None:
    """Two row-dot intrinsics from the same factory in `nb_avx2` differ only in the constants they were made
    with (the SSSE3 family's width and instruction names live in nb_ssse3.py, a file no kernel names):
    a kernel naming one must not load the other's cached code."""
    import types

    pytest.importorskip("numba")
    from npukit.sim import nb_avx2, nb_ssse3, numba_cache

    def caller():
        return dot(0, 0, 0, 0)  # noqa: F821 (bound per variant below)

    def stamped(intrinsic) -> str:
        f = types.FunctionType(caller.__code__, {"dot": intrinsic}, "caller")
        return numba_cache.reach_digest(f)

    same = nb_avx2.row_intrinsics(nb_avx2.maddubs_rows(16, "llvm.x86.ssse3.pmadd.ub.sw.128",
                                                        "llvm.x86.sse2.pmadd.wd"), "ssse3")[0]
    other = nb_avx2.row_intrinsics(nb_avx2.maddubs_rows(32, "llvm.x86.avx2.pmadd.ub.sw",
                                                         "llvm.x86.avx2.pmadd.wd"), "ssse3")[0]
    assert stamped(same) == stamped(nb_ssse3.dot_u4s8_ssse3)
    assert stamped(other) != stamped(nb_ssse3.dot_u4s8_ssse3)
    assert stamped(nb_avx2.dot_u4s8_avx2) != stamped(nb_ssse3.dot_u4s8_ssse3)
