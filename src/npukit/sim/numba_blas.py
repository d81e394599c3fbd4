"""numba's import-time BLAS probe without importing SciPy: 130-270 ms off every process that runs a kernel.

When numba first loads or compiles a function it imports its NumPy implementations, and
``numba.np.arraymath`` asks at import whether BLAS is there (``_HAVE_BLAS``) by importing
``scipy.linalg.cython_blas``: all of ``scipy.linalg`` (130 ms on the 2-core Xeon VM of
docs/targets/pccx-user-path-log.md, up to 270 ms in its slow minutes; `python -X importtime`).
npukit's kernels call no BLAS routine, yet every ``npukit generate`` paid that import before its first
token wherever SciPy is installed (the dev environment has it through scikit-learn).

`defer_probe` installs an import hook for that one module: while ``numba.np.arraymath`` executes, numba's
``ensure_blas`` answers from whether SciPy is installed (`importlib.util.find_spec`, no import), and the
real function is back as soon as the module is loaded. So ``_HAVE_BLAS`` has the value numba's own probe
gives on any working SciPy install, and a kernel that does use BLAS (``np.dot`` on float arrays) still
imports SciPy when numba compiles or loads it, through the real ``ensure_blas``. (A SciPy that is
installed but fails to import now fails there, at that kernel, not earlier.) The hook removes itself
after its one use; nothing happens where the module is already loaded.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

_TARGET = "numba.np.arraymath"


def _scipy_installed() -> None:
    """numba's ``ensure_blas`` as asked by ``arraymath`` at import: raises ImportError without SciPy."""
    if importlib.util.find_spec("scipy") is None:
        raise ImportError("scipy 0.16+ is required for linear algebra")


class _DeferredProbe(importlib.abc.MetaPathFinder):
    """Finds ``numba.np.arraymath`` through the other finders and runs its module body with
    `_scipy_installed` in place of ``numba.np.linalg.ensure_blas``."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != _TARGET:
            return None
        remove()  # one use: the lookup below and every later import see the usual finders only
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_body = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            from numba.np import linalg

            real, linalg.ensure_blas = linalg.ensure_blas, _scipy_installed
            try:
                run_body(module)
            finally:
                linalg.ensure_blas = real
                vars(loader).pop("exec_module", None)  # the loader's own method again

        loader.exec_module = exec_module  # (on this loader object only, for this one load)
        return spec


_FINDER = _DeferredProbe()


def defer_probe() -> bool:
    """Install the hook unless ``numba.np.arraymath`` is loaded already (idempotent). True if installed."""
    if _FINDER in sys.meta_path:
        return True
    if _TARGET in sys.modules:  # (numba has probed already: nothing left to defer)
        return False
    sys.meta_path.insert(0, _FINDER)
    return True


def remove() -> None:
    """Take the hook out of ``sys.meta_path`` (a no-op when it is not there)."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
