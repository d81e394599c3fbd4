"""The wheel stands alone: built from this tree, installed into a fresh virtual environment (its
dependencies taken from the running environment's site-packages, offline), it runs the README's
commands from a folder outside the repository after ``npukit examples`` copies the examples out."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cli"))
from test_readme import COMMANDS  # noqa: E402  (the README's own command lines)

# README commands run here: every one that finishes in seconds and needs neither a second process
# (nvme serve / alkali run) nor the hf extra; `generate`, `shard` and the demos run in their own tests.
QUICK = ("asm", "disasm", "sim", "vectors", "formats", "hw", "tflite", "bpf", "perf")


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


@pytest.mark.slow
def test_wheel_installs_alone_and_runs_the_readme(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels), str(ROOT)], check=True, capture_output=True)
    (wheel,) = wheels.glob("npukit-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = _venv_python(venv)
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # the dependencies, offline: a path line (not a site dir, so no editable npukit comes with it)
    deps = {str(Path(numpy.__file__).parents[1]), sysconfig.get_paths()["purelib"]}
    Path(purelib, "npukit_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
                    "--ignore-installed", "-q", str(wheel)], check=True, capture_output=True)
    work = tmp_path / "user"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    bindir = py.parent

    def npukit(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(bindir / "npukit"), *argv], cwd=work, env=env, capture_output=True,
                              text=True, timeout=300)

    where = subprocess.run([str(py), "-c", "import npukit; print(npukit.__file__)"], cwd=work, env=env,
                           check=True, capture_output=True, text=True).stdout.strip()
    assert Path(where).is_relative_to(Path(purelib)), where  # the wheel's npukit, not this tree's
    assert npukit(["examples"]).returncode == 0 and (work / "examples" / "pccx" / "softmax.s").is_file()
    ran = []
    for argv in COMMANDS:
        if not argv or argv[0] not in QUICK:
            continue
        res = npukit(argv)
        assert res.returncode == 0, f"npukit {shlex.join(argv)}: {res.stderr[-1500:]}"
        assert "Traceback" not in res.stderr
        ran.append(argv[0])
    assert {"asm", "disasm", "sim", "vectors", "tflite", "bpf", "perf"} <= set(ran)
    code = ("import npukit; m = npukit.load_model(); r = npukit.estimate(m, 'pccx-v002-kv260', context=8); "
            "print(r.joules_per_token.tier, r.joules_per_token.value > 0)")
    api = subprocess.run([str(py), "-c", code], cwd=work, env=env, capture_output=True, text=True, check=True)
    assert api.stdout.split() == ["projected", "True"]
