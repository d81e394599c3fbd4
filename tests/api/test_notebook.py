"""examples/api.ipynb runs top to bottom (nbclient, the ipykernel of this interpreter) and produces
tokens, simulated cycles and energy through the Python API alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "api.ipynb"


@pytest.mark.slow
def test_notebook_produces_tokens_cycles_and_energy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    src = str(Path(__file__).resolve().parents[2] / "src")  # this tree's npukit, not an installed one
    path = os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    monkeypatch.setenv("PYTHONPATH", path)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                   ).execute()
    sources = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "npukit.cli" not in sources and "subprocess" not in sources  # the API alone
    last = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.get("name") == "stdout")
    summary = json.loads(last)
    assert len(summary["tokens"]) == 4 and all(isinstance(t, int) for t in summary["tokens"])
    cycles, energy = summary["cycles_per_token"], summary["joules_per_token"]
    assert cycles["unit"] == "cycles" and cycles["value"] > 1000 and cycles["tier"] in ("derived", "measured")
    assert energy["unit"] == "J/token" and energy["value"] > 0 and energy["tier"] == "projected"
