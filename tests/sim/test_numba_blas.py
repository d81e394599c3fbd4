"""npukit.sim.numba_blas: numba's import-time BLAS probe imports no SciPy, and BLAS still works.

Each case runs in a fresh child process (what matters is which modules a process has loaded). The
oracles: ``sys.modules`` (was ``scipy.linalg`` imported?), numba's own probe run in a process without the
hook (the ``_HAVE_BLAS`` value it must equal), and NumPy's ``np.dot`` for a kernel that does use BLAS.
"""

from __future__ import annotations

import json
import subprocess
import sys

_CHILD = r"""
import json, sys
import numpy as np
hooked = sys.argv[1] == "hooked"
if hooked:
    from npukit.sim import compile_report, numba_blas
    compile_report.install()
    in_path = numba_blas._FINDER in sys.meta_path
import numba
from numba.np import linalg

@numba.njit(cache=False)
def total(a):
    return a.sum()

total(np.arange(5.0))  # the first compile loads numba's NumPy implementations (arraymath's probe)
from numba.np import arraymath
after_first = "scipy.linalg" in sys.modules

@numba.njit(cache=False)
def product(a, b):
    return np.dot(a, b)

a = np.arange(6.0).reshape(2, 3)
b = np.arange(12.0).reshape(3, 4)
same = bool(np.array_equal(product(a, b), a @ b))
print(json.dumps({"scipy_after_first": after_first, "have_blas": arraymath._HAVE_BLAS, "dot": same,
                  "scipy_after_dot": "scipy.linalg" in sys.modules,
                  "real_back": linalg.ensure_blas.__module__ == "numba.np.linalg",
                  "hook_was_in": in_path if hooked else None,
                  "hook_left": hooked and numba_blas._FINDER in sys.meta_path,
                  "loader_own": "exec_module" not in vars(arraymath.__spec__.loader)}))
"""


def _child(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_probe_imports_no_scipy_and_agrees_with_numbas_own():
    plain, hooked = _child("plain"), _child("hooked")
    # numba's own probe imports scipy.linalg where SciPy is installed (the dev environment: scikit-learn)
    assert plain["scipy_after_first"] is True and plain["have_blas"] is True
    assert hooked["hook_was_in"] is True
    assert hooked["scipy_after_first"] is False  # the 130-270 ms import is gone from a kernel's first load
    assert hooked["have_blas"] == plain["have_blas"]
    assert hooked["real_back"] is True and hooked["hook_left"] is False and hooked["loader_own"] is True
    # a kernel that uses BLAS still gets it: np.dot compiles, imports SciPy then, and equals NumPy
    assert hooked["dot"] is True and hooked["scipy_after_dot"] is True


def test_defer_probe_does_nothing_once_numba_has_loaded_its_numpy_implementations():
    code = ("import sys, numba.np.arraymath\nfrom npukit.sim import numba_blas\n"
            "print(numba_blas.defer_probe(), numba_blas._FINDER in sys.meta_path)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "False"]


def test_a_pccx_generate_run_never_imports_scipy_linalg():
    """The user path: ``npukit generate --target pccx`` on the embedded default model loads every decode
    kernel and never imports ``scipy.linalg`` (130-270 ms of its start before this hook)."""
    code = ("import contextlib, io, sys\nfrom npukit.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    rc = main(['generate', '--target', 'pccx', '--prompt-ids', '2,651', '--max-new-tokens', '3',"
            " '--json'])\n"
            "print(rc, 'numba.np.arraymath' in sys.modules, 'scipy.linalg' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-3:] == ["0", "True", "False"]
