"""A first run on a fresh machine is never silent: `npukit demo` on a terminal, with empty numba and
npukit caches (so every kernel compiles and every CPU trial runs), prints something at least every
3 seconds, names the kernel compiles as such, and still ends well."""

from __future__ import annotations

from pathlib import Path

import pytest
from ptyrun import run_on_pty

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parents[2]
MAX_SILENCE_S = 3.0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_first_demo_on_a_fresh_machine_is_never_silent(tmp_path: Path) -> None:
    fresh = {"NUMBA_CACHE_DIR": str(tmp_path / "numba"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
             "NPUKIT_PROGRAM_CACHE": "off"}
    rc, raw, longest, around_raw = run_on_pty(["demo", "--max-new-tokens", "8"], ROOT, timeout=900,
                                              extra_env=fresh, drop_env=("PYTEST_", "NUMBA_CPU_"))
    out, around = raw.decode(errors="replace"), around_raw.decode(errors="replace")
    assert rc == 0, out[-3000:]
    assert "compiling kernels for this CPU" in out
    assert "Performance summary" in out
    assert longest <= MAX_SILENCE_S, f"silent for {longest:.1f} s: {around!r}"
