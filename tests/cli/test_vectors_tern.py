"""`npukit vectors --target tern`: unit vectors of a BitNet run on ternfpga. Oracles, all from the files
and the definitions (refs/ternary.md), none from npukit's unit code: the recording run generates the
same tokens as the quant integer reference; engine cases recomputed with an independent base-3 decode
and a NumPy matmul; unpack codes from digit arithmetic; the EXP table from its formula; attention
num/sum_e and the FFN glue's amax in Python integers, its output within rounding of 127·N/amax; every
file at the width its manifest states."""

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


def _values(out: Path, unit: dict, case: dict, name: str) -> np.ndarray | int:
    v, f = case["values"][name], unit["fields"][name]
    if "value" in v:
        return v["value"]
    text = (out / v["file"]).read_text().split()
    assert all(len(t) == -(-f["bits"] // 4) for t in text), name  # the stated width, zero-padded
    a = np.array([int(t, 16) for t in text], dtype=object)
    if f["signed"]:
        a = np.array([x - (1 << f["bits"]) if x >> (f["bits"] - 1) else x for x in a], dtype=object)
    return a.reshape(v["shape"])


def test_tern_unit_vectors(tmp_path, capsys):
    c = tiny.config("online")
    model_dir = tiny.write_online(tmp_path / "hf", c, tiny.float_weights(c, seed=3))
    out = tmp_path / "vec"
    assert main(["vectors", "--target", "tern", "--model", str(model_dir), "--prompt-ids", "5,17",
                 "--max-new-tokens", "3", "--cases", "6", "-o", str(out)]) == 0
    capsys.readouterr()
    man = json.loads((out / "manifest.json").read_text())
    quant = generate(create_backend(load_model(model_dir), "quant"), [5, 17], 3)
    assert man["tokens"] == quant.tokens
    units = man["units"]
    assert all(0 < len(units[u]["cases"]) <= 6 for u in ("unpack", "engine", "attention", "ffn_glue"))
    for unit in units.values():  # every field of every case is there, with a shape
        for case in unit["cases"]:
            assert set(case["values"]) == set(unit["fields"])
    eng = units["engine"]
    for case in eng["cases"]:
        rows, cols = case["values"]["rows"]["value"], case["values"]["cols"]["value"]
        trits = _trits(_values(out, eng, case, "weights").astype(np.int64).reshape(-1))
        trits = trits.reshape(rows, -1)[:, :cols]
        x, y = (_values(out, eng, case, n).astype(np.int64) for n in ("x", "y"))
        assert np.array_equal(y, trits @ x), case["label"]
    unp = units["unpack"]
    b0 = _values(out, unp, unp["cases"][0], "bytes")
    assert list(b0) == list(range(256))  # case 0: every byte value
    for case in unp["cases"]:
        b = _values(out, unp, case, "bytes").astype(np.int64)
        codes = _values(out, unp, case, "codes").astype(np.int64)
        digits = np.stack([(b // 3 ** i) % 3 for i in range(5)], axis=-1)
        assert np.array_equal(codes, digits), case["label"]
    _check_attention(out, units["attention"])
    _check_ffn_glue(out, units["ffn_glue"])


def _trits(b: np.ndarray) -> np.ndarray:
    digits = np.stack([(b // 3 ** i) % 3 for i in range(5)], axis=-1)
    return np.select([digits == 1, digits == 2], [1, -1], 0).reshape(-1)


def _check_attention(out: Path, unit: dict) -> None:
    """The table from its formula (refs/ternary.md) and each case's outputs recomputed from its files."""
    exp = np.clip(np.rint(32768 * np.exp(-0.01 * np.arange(4096))), 0, 32767).astype(np.int64)
    assert unit["fields"]["exp_table"]["bits"] == 16
    for case in unit["cases"]:
        table = _values(out, unit, case, "exp_table").astype(np.int64)
        assert np.array_equal(table, exp)
        q, k, v = (_values(out, unit, case, n).astype(object) for n in ("q", "k", "v"))
        shift = case["values"]["shift"]["value"]
        assert k.shape == (case["values"]["t"]["value"], case["values"]["d"]["value"])
        s = [sum(int(a) * int(b) for a, b in zip(q, row, strict=True)) for row in k]
        e = [int(exp[min((max(s) - sj) >> shift, 4095)]) for sj in s]
        num = [sum(e[j] * int(v[j, d]) for j in range(len(e))) for d in range(len(q))]
        assert list(_values(out, unit, case, "num")) == num, case["label"]
        assert case["values"]["sum_e"]["value"] == sum(e)


def _check_ffn_glue(out: Path, unit: dict) -> None:
    """amax = max(max|relu(g)²·u·w|, 1) in Python integers; out = round-to-nearest 127·N/amax, clipped."""
    for case in unit["cases"]:
        g, u, w = (_values(out, unit, case, n) for n in ("gate", "up", "w_q"))
        n = [max(int(a), 0) ** 2 * int(b) * int(c) for a, b, c in zip(g, u, w, strict=True)]
        m = max(max(abs(x) for x in n), 1)
        assert case["values"]["amax"]["value"] == m, case["label"]
        h = _values(out, unit, case, "out")
        # |h| is 127·|N|/M rounded (the unit's fixed-point reciprocal is within half an LSB of it)
        assert all(abs(abs(int(hi)) - 127 * abs(x) / m) <= 0.5 + 1e-6 for hi, x in zip(h, n, strict=True))
        assert all(int(hi) == 0 or (int(hi) < 0) == (x < 0) for hi, x in zip(h, n, strict=True))
