"""The import-linter contracts in pyproject.toml hold, and breaking one fails `lint-imports` (and so
`make test`). The broken cases run on a copy of the package's Python files with one import added."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(src: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([str(LINT), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def _copy(tmp: Path) -> Path:
    src = tmp / "src"
    shutil.copytree(ROOT / "src" / "npukit", src / "npukit", ignore=shutil.ignore_patterns(
        "__pycache__", "assets", "presets", "*.safetensors", "*.json", "*.toml"))
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    return src


def test_the_tree_keeps_every_contract():
    res = _lint(ROOT / "src", ROOT)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


LAYERS, INDEPENDENT, ACYCLIC = "npukit layers", "targets are independent", "no import circles"


@pytest.mark.parametrize(("module", "line", "contracts"), [
    # a lower layer imports a higher one; models already reach sim (the TFLite kernels announce their
    # compiles through sim.compile_report), so the two packages now also import each other
    ("sim/work.py", "import npukit.models.loading", [LAYERS, ACYCLIC]),
    ("targets/tern/units.py", "import npukit.targets.pccx.numerics", [INDEPENDENT]),
    # the base imports a target: a layer violation, every target now reaches pccx through it, and the
    # registry and the targets import each other
    ("registry.py", "import npukit.targets.pccx.hw", [LAYERS, INDEPENDENT, ACYCLIC]),
    # the circle the fast executor had: a binder importing the simulator that imports it
    ("targets/pccx/fast/fastmat.py", "import npukit.targets.pccx.fast.fastsim", [ACYCLIC]),
    # the circle pccx had: the assembler running the simulator that labels with the assembler
    ("targets/pccx/asm.py", "import npukit.targets.pccx.sim", [ACYCLIC]),
    # any package now, not only a listed few
    ("models/bitnet/intpath.py", "import npukit.models.bitnet.model", [ACYCLIC]),
])
def test_an_offending_import_breaks_its_contract(tmp_path, module, line, contracts):
    src = _copy(tmp_path)
    path = src / "npukit" / module
    path.write_text(path.read_text() + f"\n{line}  # offending\n")
    res = _lint(src, tmp_path)
    assert res.returncode != 0
    broken = [ln for ln in res.stdout.splitlines() if ln.endswith("BROKEN") or " BROKEN (" in ln]
    assert len(broken) == len(contracts), res.stdout[-2000:]
    assert all(b.startswith(c) for b, c in zip(broken, contracts, strict=True)), broken


def test_architecture_doc_lists_every_layer_in_contract_order():
    """docs/architecture.md's table names each layer of the contract, top to bottom, and every
    top-level package of npukit."""
    import re
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in cfg if c["id"] == "layers")["layers"]
    doc = (ROOT / "docs" / "architecture.md").read_text()
    rows = [ln for ln in doc.splitlines() if ln.startswith("| ") and "src/npukit/" in ln]
    cells = [re.findall(r"src/npukit/(?:\{([^}]*)\}|([\w_]+))", ln) for ln in rows]
    named = [{n.strip().removesuffix(".py") for a, b in found for n in (a.split(",") if a else [b])}
             for found in cells]
    positions = []
    for layer in layers:
        parts = [p.strip() for p in layer.split("|")]
        pos = [next(i for i, names in enumerate(named) if p in names) for p in parts]
        positions.append(min(pos))
    assert positions == sorted(positions), (layers, positions)
    packages = {p.name.removesuffix(".py") for p in (ROOT / "src" / "npukit").iterdir()
                if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert packages <= set().union(*named), packages - set().union(*named)
