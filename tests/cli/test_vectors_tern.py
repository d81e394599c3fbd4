"""`npukit vectors --target tern`: unit vectors of a BitNet run on ternfpga. Oracles: every engine case
is recomputed from its own $readmemh files with an independent base-3 decode and a NumPy integer matmul;
the recording run generates the same tokens as the quant integer reference (recording changes
nothing); every file has the port width the manifest states."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from npukit.cli.main import main
from npukit.models.loading import load_model
from npukit.runtime.backends import create_backend
from npukit.runtime.generate import generate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
import bitnet_tiny as tiny


def _read(path: Path, bits: int) -> np.ndarray:
    v = np.array([int(x, 16) for x in path.read_text().split()], dtype=object)
    signed = [x - (1 << bits) if x >= 1 << (bits - 1) else x for x in v]
    return np.array(signed, dtype=np.int64)


def test_tern_unit_vectors(tmp_path, capsys):
    c = tiny.config("online")
    model_dir = tiny.write_online(tmp_path / "hf", c, tiny.float_weights(c, seed=3))
    out = tmp_path / "vec"
    assert main(["vectors", "--target", "tern", "--model", str(model_dir), "--prompt-ids", "5,17",
                 "--max-new-tokens", "3", "-o", str(out)]) == 0
    capsys.readouterr()
    man = json.loads((out / "manifest.json").read_text())
    quant = generate(create_backend(load_model(model_dir), "quant"), [5, 17], 3)
    assert man["tokens"] == quant.tokens
    units = man["units"]
    assert units["engine"] and units["attention"] and units["ffn_glue"]
    for case in units["engine"]:
        w = _read(out / case["weights"]["file"], 8) & 0xFF
        digits = np.stack([(w // 3 ** i) % 3 for i in range(5)], axis=-1)
        trits = np.select([digits == 1, digits == 2], [1, -1], 0).reshape(case["rows"], -1)[:, : case["cols"]]
        x = _read(out / case["x"]["file"], 8).reshape(case["x"]["shape"])
        y = _read(out / case["y"]["file"], 32).reshape(case["y"]["shape"])
        assert np.array_equal(y, x @ trits.T), case["label"]
        assert w.size == case["rows"] * -(-case["cols"] // 5)
    for unit in ("attention", "ffn_glue"):
        for case in units[unit]:
            for port in case.values():
                if isinstance(port, dict):
                    text = (out / port["file"]).read_text().split()
                    assert len(text) == int(np.prod(port["shape"]))
                    assert all(len(t) == port["bits"] // 4 for t in text)
