"""CPU dispatch: the compile target numba uses, LLVM's verdict on each intrinsic per CPU (against
Intel's and AMD's published ISA tables), the trial's outcomes, and the override."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("numba")

from npukit.sim import cpu

X86 = cpu.compile_target().arch in ("x86_64", "amd64")

# Which AVX-512 extensions each CPU has, from the vendors' ISA tables (Intel ARK / optimisation manual,
# AMD's Zen 4 ISA): VNNI arrived with Cascade Lake, VBMI with Cannon/Ice Lake; Zen 3 has no AVX-512.
VENDOR_TABLE = {
    "x86-64": (False, False), "x86-64-v2": (False, False), "haswell": (False, False),
    "znver3": (False, False), "skylake-avx512": (False, False), "cascadelake": (True, False),
    "icelake-server": (True, True), "sapphirerapids": (True, True), "znver4": (True, True),
}
# AVX2 (256-bit vpmaddubsw / vpmaddwd): Intel from Haswell, AMD from Excavator/Zen 1; x86-64-v3 and up.
# Sandy/Ivy Bridge have AVX without AVX2.
AVX2 = {"x86-64": False, "x86-64-v2": False, "sandybridge": False, "ivybridge": False, "haswell": True,
        "znver1": True, "znver3": True, "skylake-avx512": True, "cascadelake": True, "icelake-server": True,
        "sapphirerapids": True, "znver4": True}
# SSSE3 (128-bit pmaddubsw; pmaddwd is SSE2): Intel from Core 2 (Merom), AMD from Bobcat/Bulldozer;
# x86-64-v2 and up. Baseline x86-64 (SSE2) and AMD K8/K10 (SSE3, SSE4a) lack it.
SSSE3 = {"x86-64": False, "k8": False, "amdfam10": False, "core2": True, "nehalem": True, "x86-64-v2": True,
         "sandybridge": True, "btver1": True, "bdver1": True, "haswell": True, "znver3": True,
         "skylake-avx512": True}


def _target(name: str) -> cpu.CompileTarget:
    return cpu.CompileTarget("x86_64", name, "", "test")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Each test decides afresh, in its own cache folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("NPUKIT_SIMD", raising=False)
    cpu._CHOSEN.clear()
    yield
    cpu._CHOSEN.clear()


@pytest.mark.skipif(not X86, reason="the intrinsics are x86 ones; other CPUs take the portable builds")
@pytest.mark.parametrize("name", sorted(VENDOR_TABLE))
def test_llvm_verdict_matches_vendor_isa_tables(name: str) -> None:
    vnni, vbmi = VENDOR_TABLE[name]
    assert cpu.llvm_compiles("vpdpbusd", _target(name))[0] is vnni
    assert cpu.llvm_compiles("vpermi2b", _target(name))[0] is vbmi


@pytest.mark.skipif(not X86, reason="the intrinsics are x86 ones; other CPUs take the portable builds")
@pytest.mark.parametrize("name", sorted(AVX2))
def test_llvm_avx2_verdict_matches_vendor_isa_tables(name: str) -> None:
    assert cpu.llvm_compiles("vpmaddubsw", _target(name))[0] is AVX2[name]
    assert cpu.llvm_compiles("vpmaddwd", _target(name))[0] is AVX2[name]


@pytest.mark.skipif(not X86, reason="the intrinsics are x86 ones; other CPUs take the portable builds")
@pytest.mark.parametrize("name", sorted(SSSE3))
def test_llvm_ssse3_verdict_matches_vendor_isa_tables(name: str) -> None:
    assert cpu.llvm_compiles("pmaddubsw", _target(name))[0] is SSSE3[name]
    assert cpu.llvm_compiles("pmaddwd", _target(name))[0] is True  # SSE2: every x86-64


def test_llvm_verdict_is_remembered_and_explains_itself(tmp_path) -> None:
    ok, why = cpu.llvm_compiles("vpermi2b", _target("haswell"))
    assert not ok and "haswell" in why
    if X86:
        assert json.loads((tmp_path / "npukit" / "cpu-paths.json").read_text())


def test_explicit_features_parse() -> None:
    t = cpu.CompileTarget("x86_64", "haswell", "+avx2,-avx512vnni, +fma", "test")
    assert t.explicit() == {"avx2": True, "avx512vnni": False, "fma": True}
    assert t.shown_features()["avx512vnni"] is False


def _family(trial: str, name: str) -> cpu.Family:
    return cpu.Family(name=name, fast="fast-path", intrinsics=(), trial=trial)


def test_trial_that_runs_exactly_takes_the_fast_path() -> None:
    chosen = cpu.choose(_family("builtins:object", "ok-family"))  # object() is truthy
    assert chosen.path == "fast-path" and "ran exactly" in chosen.reason


def test_trial_with_a_wrong_result_falls_back() -> None:
    chosen = cpu.choose(_family("builtins:bool", "wrong-family"))  # bool() is False
    assert chosen.path == cpu.PORTABLE and "wrong result" in chosen.reason


def test_trial_killed_by_a_signal_falls_back_and_is_remembered() -> None:
    fam = _family("os:abort", "abort-family")  # as an illegal instruction or an LLVM abort would
    chosen = cpu.choose(fam)
    assert chosen.path == cpu.PORTABLE and "SIGABRT" in chosen.reason
    cpu._CHOSEN.clear()
    again = cpu.choose(fam)
    assert again.path == cpu.PORTABLE and "remembered" in again.reason


def test_a_hung_trial_is_killed_not_remembered(monkeypatch) -> None:
    import time

    monkeypatch.setattr(cpu, "_TRIAL_TIMEOUT_S", 1.0)
    fam = _family("signal:pause", "hung-family")  # waits for a signal that never comes
    t0 = time.monotonic()
    chosen = cpu.choose(fam)
    assert chosen.path == cpu.PORTABLE and "did not finish" in chosen.reason
    assert time.monotonic() - t0 < 30
    memo = cpu.cache_dir() / "cpu-paths.json"  # a loaded machine is not a property of the CPU
    assert not memo.exists() or "did not finish" not in memo.read_text()


def test_npukit_simd_portable_overrides(monkeypatch) -> None:
    monkeypatch.setenv("NPUKIT_SIMD", "portable")
    assert cpu.choose(_family("builtins:object", "forced-family")).path == cpu.PORTABLE


def _in_child(env: dict[str, str], code: str) -> str:
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True,
                          check=True, timeout=600).stdout.strip()


def test_compile_target_follows_numba_environment() -> None:
    code = "from npukit.sim import cpu; t = cpu.compile_target(); print(t.cpu, repr(t.features), t.origin)"
    assert _in_child({"NUMBA_CPU_NAME": "generic"}, code) == "generic '' NUMBA_CPU_NAME=generic"
    out = _in_child({"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "+64bit"}, code)
    assert out == "haswell '+64bit' NUMBA_CPU_FEATURES"


@pytest.mark.skipif(not X86, reason="x86 targets")
def test_families_never_take_a_path_the_target_lacks(tmp_path) -> None:
    """cascadelake has VNNI but not VBMI: the FP8 family must be portable there whatever the host."""
    code = ("from npukit.sim import nb_avx2, nb_simd, nb_ssse3; from npukit.kernels.fp8 import _nb;"
            "print(nb_simd.probe()[0], _nb.probe()[0], nb_avx2.probe()[0], nb_ssse3.probe()[0])")
    env = {"NUMBA_CPU_NAME": "cascadelake", "NUMBA_CPU_FEATURES": "+64bit",
           "NUMBA_CACHE_DIR": str(tmp_path / "nb")}
    int4, fp8, avx2, _ = _in_child(env, code).split()
    assert fp8 == "portable"
    assert int4 in ("avx512-vnni", "portable")  # VNNI where this host's silicon runs it (trial)
    assert avx2 in ("avx2", "portable")
    env["NUMBA_CPU_NAME"] = "haswell"
    assert _in_child(env, code).split()[:2] == ["portable", "portable"]
    env["NUMBA_CPU_NAME"] = "x86-64-v2"  # SSE4.2 and SSSE3, no AVX2: only the SSSE3 family may be fast
    int4, fp8, avx2, ssse3 = _in_child(env, code).split()
    assert [int4, fp8, avx2] == ["portable"] * 3 and ssse3 in ("ssse3", "portable")  # (its trial here)
    env["NUMBA_CPU_NAME"], env["NUMBA_CPU_FEATURES"] = "generic", ""  # baseline SSE2: every family portable
    assert _in_child(env, code).split() == ["portable"] * 4
