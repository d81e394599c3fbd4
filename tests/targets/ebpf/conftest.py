"""Shared fixtures: the committed clang-built firmware objects and a native build of the same C."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "alkali"
CPUS = ("v1", "v2", "v3")


def clang() -> str | None:
    return shutil.which("clang-14") or shutil.which("clang")


@pytest.fixture(scope="session")
def native_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """checksum_words / sort_words compiled natively by clang from the firmware's own headers."""
    cc = clang()
    if cc is None:
        pytest.fail("clang is needed for the native oracle (apt-get install clang-14)")
    d = tmp_path_factory.mktemp("native")
    src = d / "native.c"
    src.write_text(
        '#include "checksum_core.h"\n#include "sort_core.h"\n'
        "unsigned long checksum(const unsigned char *b, unsigned long n) { return checksum_words(b, n); }\n"
        "void sort(unsigned int *v, unsigned long n) { sort_words(v, n); }\n"
    )
    lib = d / "libnative.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{EXAMPLES}", str(src), "-o", str(lib)], check=True)
    dll = ctypes.CDLL(str(lib))
    dll.checksum.restype = ctypes.c_ulong
    dll.checksum.argtypes = [ctypes.c_char_p, ctypes.c_ulong]
    dll.sort.restype = None
    dll.sort.argtypes = [ctypes.c_void_p, ctypes.c_ulong]
    return dll
