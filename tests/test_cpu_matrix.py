"""The CPU matrix: npukit's compiled paths built for other x86-64 CPUs than this one, run here.

numba compiles for ``NUMBA_CPU_NAME``; ``NUMBA_CPU_FEATURES=+64bit`` (a feature every x86-64 has) stops
numba from appending this host's feature list, so LLVM generates code with exactly that CPU's own
features: a laptop's Haswell, AMD Zen 3, Skylake-SP (AVX-512 without VNNI), Cascade Lake (VNNI without
VBMI), baseline x86-64 and x86-64-v2, and this host's own CPU with VBMI switched off (the Cascade
Lake-class machine where the FP8 kernel used to abort every run; skipped where the host has no VBMI,
as it is then the host's own build). Each runs in its own process with its own numba cache, from one
staged copy of src/ (scripts/staged_src.py: a fresh clone of a seen tree loads its kernels): the FP8
GEMM against the contract's NumPy reference, a pccx and a tern generate (tokens, logits, cycles), the
SIMD, FP8 and TFLite int8 kernel tests (each int8-conv build against the readable kernels and
LiteRT); every result must equal this host's bit for bit, and no kernel family may take a path
whose instructions the target lacks (the vendors' ISA tables, as in tests/sim/test_cpu.py).
The code runs on this host's silicon: what is checked is what LLVM generates for each CPU.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

from npukit.sim import cpu

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "models"))
sys.path.insert(0, str(ROOT / "scripts"))
import bitnet_tiny as tiny  # noqa: E402

import staged_src  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200),
              pytest.mark.skipif(cpu.compile_target().arch not in ("x86_64", "amd64"),
                                 reason="x86-64 CPU names; aarch64 has its own smoke test")]

# the fast paths each target may take (int4 GEMV on VNNI, FP8 GEMM, TFLite int8 conv, int4 GEMV on AVX2,
# int4 GEMV on SSSE3), from the vendors' ISA tables
ALLOWED = {
    "generic": ("portable", "portable", "portable", "portable", "portable"),
    "x86-64-v2": ("portable", "portable", "portable", "portable", "ssse3"),
    "haswell": ("portable", "portable", "portable", "avx2", "ssse3"),
    "znver3": ("portable", "portable", "portable", "avx2", "ssse3"),
    "skylake-avx512": ("portable", "portable", "portable", "avx2", "ssse3"),
    "cascadelake": ("avx512-vnni", "portable", "avx512-vnni", "avx2", "ssse3"),
    "host-without-vbmi": ("avx512-vnni", "portable", "avx512-vnni", "avx2", "ssse3"),
}
INT4_FAMILIES = ("int4-gemv", "int4-gemv-avx2", "int4-gemv-ssse3")  # the pccx INT4 row dots, fastest first
# the INT4 path the pccx fast executor takes where this host's silicon runs every build: VNNI first, then
# AVX2, then SSSE3 (a class must not fall back to a slower loop than its best: the speed issue 29 is about)
PCCX_INT4 = {"generic": "portable", "x86-64-v2": "ssse3", "haswell": "avx2", "znver3": "avx2",
             "skylake-avx512": "avx2", "cascadelake": "avx512-vnni", "host-without-vbmi": "avx512-vnni"}
# instructions LLVM may emit for each CPU when it vectorises (vendor tables): a CPU whose set this host
# lacks is not run here (its code would fault), it is reported as skipped with what is missing
_HASWELL = ("sse4.2", "popcnt", "avx", "avx2", "fma", "bmi", "bmi2", "lzcnt", "f16c", "movbe")
_SKX = (*_HASWELL, "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd")
NEEDS = {"generic": (), "x86-64-v2": ("sse4.2", "popcnt", "ssse3"), "haswell": _HASWELL, "znver3": _HASWELL,
         "skylake-avx512": _SKX, "cascadelake": (*_SKX, "avx512vnni"), "host-without-vbmi": ()}
KERNEL_TESTS = ["tests/sim/test_nb_simd.py", "tests/sim/test_nb_avx2.py", "tests/sim/test_nb_ssse3.py",
                "tests/targets/pccx/fast/test_nbkernels_gemm.py",
                "tests/kernels/test_fp8_contract.py",
                "tests/models/tflite/test_tflite_int8_kernels.py"]


def matrix_cache() -> Path:
    """Each class's numba cache (``numba-<name>``) and the staged source trees (``src``)."""
    return cpu.cache_dir() / "cpu-matrix"


@functools.cache
def staged_tree() -> Path:
    """This checkout's src/ as a content-addressed copy (scripts/staged_src.py): a fresh clone of a tree
    seen before finds every class's kernels in the cache (~25 s a class, not ~110 s of compiling)."""
    return staged_src.stage_source(ROOT / "src", matrix_cache())


def vbmi_features(features: dict[str, bool]) -> list[str]:
    """The host features `host-without-vbmi` switches off (AVX10 implies every AVX-512 subset)."""
    return [f for f, on in features.items() if on and f.startswith(("avx10", "avx512vbmi"))]


def cpu_env(name: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_CPU_", "PYTEST_", "NPUKIT_SIMD"))}
    if name == "host-without-vbmi":  # the Cascade Lake-class host of issue 24: this host's features less VBMI
        import llvmlite.binding as ll

        feats = ll.get_host_cpu_features()
        for f in vbmi_features(feats):
            feats[f] = False
        env["NUMBA_CPU_NAME"] = ll.get_host_cpu_name()
        env["NUMBA_CPU_FEATURES"] = feats.flatten()
    elif name != "host":
        env["NUMBA_CPU_NAME"] = name
        env["NUMBA_CPU_FEATURES"] = "" if name == "generic" else "+64bit"
    env["NUMBA_CACHE_DIR"] = str(matrix_cache() / f"numba-{name}")
    env["PYTHONPATH"] = os.pathsep.join([str(staged_tree()), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _npukit(env: dict[str, str], *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "npukit", *args], env=env, capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert done.returncode == 0, f"npukit {' '.join(args)}: rc {done.returncode}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout)


def run_jobs(name: str, bitnet_dir: Path) -> dict:
    env = cpu_env(name)
    doctor = _npukit(env, "doctor", "--json")
    paths = {k["family"]: k["path"] for k in doctor["kernels"]}
    fp8 = _npukit(env, "fp8", "gemm", "--m", "16", "--n", "512", "--k", "512", "--check", "--json")
    pccx = _npukit(env, "generate", "--target", "pccx", "--max-new-tokens", "4", "--json", "--logits")
    tern = _npukit(env, "generate", str(bitnet_dir), "--prompt-ids", "5,17,42", "--max-new-tokens", "3",
                   "--target", "tern", "--json", "--logits", "--ignore-eos")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                           *KERNEL_TESTS], env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    return {"target": doctor["cpu"]["compile_target"], "paths": paths, "fp8": fp8,
            "pccx_int4": doctor["pccx_int4"]["path"],  # the INT4 build the pccx kernel table took
            "pccx": _essence(pccx), "tern": _essence(tern),
            "kernel_tests": (done.returncode, done.stdout[-2500:] + done.stderr[-1500:])}


def _essence(gen: dict) -> dict:
    """What must not depend on the CPU: tokens, logits (bits), simulated cycles."""
    backend = gen["stats"]["backend"]
    return {"tokens": gen["tokens"], "logits": gen["logits"],
            "cycles": backend.get("simulated_cycles_per_token") or backend.get("figures", {})}


@pytest.fixture(scope="module")
def bitnet_dir(tmp_path_factory) -> Path:
    c = tiny.config("online")
    return tiny.write_online(tmp_path_factory.mktemp("bitnet") / "hf", c, tiny.float_weights(c, seed=7))


@pytest.fixture(scope="module")
def host(bitnet_dir) -> dict:
    return run_jobs("host", bitnet_dir)


def best_int4(name: str, host_paths: dict[str, str]) -> str:
    """The pccx INT4 path class ``name`` must take on this silicon: the first of its allowed fast INT4
    families (`INT4_FAMILIES` order) whose fast build this host's own target runs (host ``paths``)."""
    allowed = {"int4-gemv": ALLOWED[name][0], "int4-gemv-avx2": ALLOWED[name][3],
               "int4-gemv-ssse3": ALLOWED[name][4]}
    fast = [allowed[f] for f in INT4_FAMILIES if allowed[f] != "portable" and host_paths[f] == allowed[f]]
    return fast[0] if fast else "portable"


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_each_class_best_int4_path_is_the_table_s(name: str) -> None:
    """On silicon that runs every family (a VNNI host), each class takes `PCCX_INT4`'s path; with no
    fast family it takes the portable loop."""
    every = {"int4-gemv": "avx512-vnni", "int4-gemv-avx2": "avx2", "int4-gemv-ssse3": "ssse3"}
    assert best_int4(name, every) == PCCX_INT4[name]
    assert best_int4(name, dict.fromkeys(every, "portable")) == "portable"


def _check_alone(res: dict) -> None:
    assert res["fp8"]["bit_identical"] is True, res["fp8"]
    rc, log = res["kernel_tests"]
    assert rc == 0, log
    assert len(res["pccx"]["tokens"]) == 4 and len(res["tern"]["tokens"]) == 3


def test_host(host) -> None:
    _check_alone(host)


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_cpu_target_is_exact_and_takes_only_its_paths(name: str, host: dict, bitnet_dir: Path) -> None:
    import llvmlite.binding as ll

    have = {f for f, on in ll.get_host_cpu_features().items() if on}
    missing = [f for f in NEEDS[name] if f not in have]
    if missing:
        pytest.skip(f"this host lacks {', '.join(missing)}: code built for {name} cannot run here")
    if name == "host-without-vbmi" and not vbmi_features(ll.get_host_cpu_features()):
        pytest.skip("this host has no VBMI (nor AVX10) to switch off: host-without-vbmi is the host's own "
                    "build, which test_host ran")
    res = run_jobs(name, bitnet_dir)
    assert res["target"] == cpu_env(name)["NUMBA_CPU_NAME"]
    _check_alone(res)
    int4_max, fp8_max, conv_max, avx2_max, ssse3_max = ALLOWED[name]
    assert res["paths"]["int4-gemv"] in {"portable", int4_max}
    assert res["paths"]["fp8-gemm"] in {"portable", fp8_max}
    assert res["paths"]["int8-conv"] in {"portable", conv_max}
    assert res["paths"]["int4-gemv-avx2"] in {"portable", avx2_max}
    assert res["paths"]["int4-gemv-ssse3"] in {"portable", ssse3_max}
    assert res["pccx_int4"] == best_int4(name, host["paths"])  # each class takes its best this silicon runs
    assert res["fp8"]["simd"] == res["paths"]["fp8-gemm"]
    for job in ("pccx", "tern"):
        assert res[job] == host[job], f"{job} on {name} differs from the host's"
