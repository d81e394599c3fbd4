"""numba's disk cache, stamped with what a kernel reaches in other files, not only its own file.

numba stamps a cached kernel with the hash of the file that defines it, and documents the gap: an edit
of a function it calls in another file is not seen, nor of a constant it read from another module (both
are compiled into it). npukit's kernels call across files everywhere (the fused block in `_nbblock`
runs `_nbkernels`' serial twins; the timing loop reads `timing_types`' tolerances), so an edit of a
callee left the caller's old machine code in ``__pycache__`` and every later process loaded it:
found when a faster FP16 GEMV in `_nbkernels` measured as the old one inside the block until the
block's cache was deleted. A clean clone (CI) or a new install never saw it; a developer's tree did,
and its tests ran the old code.

`install` puts `DependentStamp` in front of numba's locators for functions defined under npukit's
package: the cache directory and file names are what numba's own locator gives (it is asked, and
kept), and the stamp is that locator's together with a digest of what the function reaches
(`reach_digest`): the source hash of every file defining a jitted function, intrinsic or module it
names, transitively, and the value of each plain constant it names. A changed callee or constant is a
different stamp, so the entry is compiled again (once) instead of loaded. ``NUMBA_CACHE_LOCATOR_CLASSES``
set by the user is numba's own override and is left to win.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import types
from pathlib import Path
from typing import Any

import numpy as np
from numba.core import caching

_PACKAGE = str(Path(__file__).resolve().parents[1])  # npukit's own package directory
_PLAIN = (int, float, complex, bool, str, bytes, type(None))


class DependentStamp(caching._CacheLocator):
    """numba's locator for the function (as numba would pick it), its stamp extended by `reach_digest`."""

    roots: tuple[str, ...] = (_PACKAGE,)  # the directories whose functions get this stamp

    def __init__(self, inner: caching._CacheLocator, py_func: types.FunctionType) -> None:
        self._inner, self._func = inner, py_func
        self._py_file = getattr(inner, "_py_file", None)  # (numba's warnings name the file)

    def ensure_cache_path(self) -> None:
        self._inner.ensure_cache_path()

    def get_cache_path(self) -> str:
        return self._inner.get_cache_path()

    def get_disambiguator(self) -> str:
        return self._inner.get_disambiguator()

    def get_source_stamp(self) -> Any:
        return _LazyStamp(self._inner.get_source_stamp(), self._func)

    @classmethod
    def from_function(cls, py_func: types.FunctionType, py_file: str) -> DependentStamp | None:
        if not _inside(os.path.realpath(py_file)):
            return None
        for numba_locator in _NUMBA_LOCATORS:
            inner = numba_locator.from_function(py_func, py_file)
            if inner is not None:
                return cls(inner, py_func)
        return None


class _LazyStamp:
    """numba's stamp and `reach_digest`, the digest made when numba first compares or saves the stamp (a
    kernel's first call), not when the kernel is defined: at definition its module, and modules importing
    it, are still being executed, so names defined below it are missing, and which ones depends on the
    import order of the process. Compared and pickled as the plain pair."""

    __slots__ = ("_func", "_inner", "_pair")

    def __init__(self, inner: Any, func: types.FunctionType) -> None:
        self._inner, self._func, self._pair = inner, func, None

    def pair(self) -> tuple[Any, str]:
        if self._pair is None:
            try:
                digest = reach_digest(self._func)
            except Exception as exc:  # (a kernel must still load: with numba's own stamp then)
                digest = f"unwalked: {type(exc).__name__}"
            self._pair = (self._inner, digest)
        return self._pair

    def __eq__(self, other: object) -> bool:
        return self.pair() == (other.pair() if isinstance(other, _LazyStamp) else other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.pair())

    def __reduce__(self) -> tuple:
        return (tuple, (self.pair(),))


_NUMBA_LOCATORS: list[type] = []


def install() -> None:
    """Put `DependentStamp` first in numba's locator list (once per process). A numba without the
    locator list this reads (a later release) keeps its own cache behaviour."""
    impl = caching.CacheImpl
    known = isinstance(getattr(impl, "_locator_classes", None), list)
    if not known or not hasattr(caching, "_hash_source_file"):
        return
    if DependentStamp not in impl._locator_classes:
        _NUMBA_LOCATORS[:] = impl._locator_classes
        impl._locator_classes = [DependentStamp, *_NUMBA_LOCATORS]


def reach_digest(func: types.FunctionType) -> str:
    """A digest of what ``func`` compiles in from outside its own code: each file defining a jitted function,
    intrinsic or module it names (its globals, through attributes of the modules too, and its free
    variables), transitively, by source hash; each plain constant (numbers, strings, tuples of them,
    arrays) by value."""
    files: set[str] = set()
    values: dict[str, str] = {}
    todo, seen = [func], set()
    while todo:
        f = todo.pop()
        if id(f) not in seen:
            seen.add(id(f))
            direct = _direct(f)
            files |= direct[0]
            values.update(direct[1])
            todo.extend(direct[2])
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + _file_hash(path) + b"\0")
    for name in sorted(values):
        h.update(f"{name}={values[name]}\0".encode())
    return h.hexdigest()


# a function's own references, made once (each kernel's stamp walks its callees' again): id -> (the
# function, kept so the id stays its own; files, constants by qualified name, jitted callees)
_DIRECT: dict[int, tuple[types.FunctionType, frozenset[str], dict[str, str], list]] = {}


def _direct(func: types.FunctionType) -> tuple[frozenset[str], dict[str, str], list]:
    hit = _DIRECT.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1:]
    files: set[str] = set()
    values: dict[str, str] = {}
    callees: list = []
    glb = getattr(func, "__globals__", {})
    names = _names(func.__code__)
    where = getattr(func, "__module__", "?")
    for name in names:
        obj = glb.get(name, _MISSING)
        if obj is _MISSING:
            continue
        if isinstance(obj, types.ModuleType):  # `nbk.gemv_f16_1`: the module's file, and what it names
            if not _add_file(obj, files):
                continue  # (NumPy, numba: installed, not edited in place; numba's index has its version)
            for attr in names:  # (the module's own dict: a PEP 562 `__getattr__` is never called)
                inner = vars(obj).get(attr, _MISSING)
                if inner is not _MISSING and not isinstance(inner, types.ModuleType):
                    _refer(f"{obj.__name__}.{attr}", inner, files, values, callees)
        else:
            _refer(f"{where}.{name}", obj, files, values, callees)
    # a function made by a factory (an intrinsic's definition over a row-pass builder:
    # `nb_avx2.row_intrinsics`) holds what it compiles in as free variables: each plain function there
    # walked like a callee, each constant by value (the SSSE3 family's register width and intrinsic names
    # live in nb_ssse3.py, a file no kernel names)
    for var, cell in zip(func.__code__.co_freevars, getattr(func, "__closure__", None) or (), strict=True):
        try:
            obj = cell.cell_contents
        except ValueError:  # (a cell not filled yet)
            continue
        if isinstance(obj, types.FunctionType):
            if _add_file(obj, files):
                callees.append(obj)
        else:
            _refer(f"{where}.{func.__qualname__}.{var}", obj, files, values, callees)
    made = (func, frozenset(files), values, callees)
    _DIRECT[id(func)] = made
    return made[1:]


def _refer(name: str, obj: Any, files: set[str], values: dict[str, str], callees: list) -> None:
    py_func = getattr(obj, "py_func", None) or getattr(obj, "_defn", None)  # a dispatcher; an intrinsic
    if isinstance(py_func, types.FunctionType):
        if _add_file(py_func, files):
            callees.append(py_func)
        return
    value = _constant(obj)
    if value is not None:
        values[name] = value


def _constant(obj: Any) -> str | None:
    """A constant numba would compile in, as text (None: not one)."""
    if isinstance(obj, _PLAIN) or (isinstance(obj, tuple) and all(isinstance(x, _PLAIN) for x in obj)):
        return repr(obj)
    if isinstance(obj, np.ndarray | np.generic):
        return f"{obj.dtype}{getattr(obj, 'shape', ())}:{hashlib.sha256(obj.tobytes()).hexdigest()}"
    return None


def _names(code: types.CodeType) -> set[str]:
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return out


def _add_file(obj: Any, files: set[str]) -> bool:
    """Add the file defining ``obj`` where it lies under `DependentStamp.roots`; whether it does."""
    try:
        path = os.path.realpath(inspect.getfile(obj))
    except (TypeError, OSError):
        return False
    if not _inside(path) or not os.path.isfile(path):
        return False
    files.add(path)
    return True


def _inside(path: str) -> bool:
    return any(path.startswith(root + os.sep) for root in DependentStamp.roots)


def _file_hash(path: str) -> bytes:
    st = os.stat(path)
    return caching._hash_source_file(path, st.st_mtime, st.st_size)  # (numba's own, memoised per stamp)


_MISSING = object()
