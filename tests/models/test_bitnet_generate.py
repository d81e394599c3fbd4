"""``npukit generate MODEL --target {golden,quant,tern}`` for BitNet: same CLI and JSON contract."""

import json

import bitnet_tiny as tiny
import numpy as np
import pytest

from npukit.cli.main import main
from npukit.models.loading import load_model
from npukit.runtime.backends import create_backend


def _gen(capsys, path, target, n=20):
    rc = main(["generate", str(path), "--prompt-ids", "5,17,42,99", "--max-new-tokens", str(n), "--target",
               target, "--json", "--logits", "--ignore-eos"])
    assert rc == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    c = tiny.config("online")
    return tiny.write_online(tmp_path_factory.mktemp("bitnet") / "hf", c, tiny.float_weights(c, seed=7))


@pytest.mark.hf
@pytest.mark.slow
def test_golden_cli_matches_transformers(capsys, hf_dir):
    out = _gen(capsys, hf_dir, "golden", 20)
    hf_toks, hf_logits = tiny.hf_greedy(hf_dir, [5, 17, 42, 99], 20)
    assert out["family"] == "bitnet" and out["tokens"] == hf_toks
    got = np.array(out["logits"], dtype=np.float32)
    assert got.shape == (20, 256)
    assert np.abs(got - np.stack(hf_logits)).max() < 1e-3


def test_tern_is_bit_identical_to_quant(capsys, hf_dir):
    q = _gen(capsys, hf_dir, "quant", 20)
    t = _gen(capsys, hf_dir, "tern", 20)
    assert t["tokens"] == q["tokens"]
    assert np.array_equal(np.array(t["logits"], np.float32), np.array(q["logits"], np.float32))
    st = t["stats"]["backend"]
    # the engine ran every projection: 2 layers × 7 GEMVs per forward (prefill + 19 steps)
    assert st["engine_gemvs"] == 2 * 7 * 20
    assert st["engine_cycles"] < st["engine_dense_cycles"]  # relu² zeros skipped by the gather


def test_backend_stats_count_tiles(hf_dir):
    model = load_model(hf_dir)
    b = create_backend(model, "tern", gather=False)
    b.prefill([1, 2, 3])
    s = b.stats()
    # hand count per token: q,k,v,o,gate,up at ceil(64/8)=8 tiles per row; down ceil(128/8)=16
    per_token = 2 * ((64 + 32 + 32) * 8 + 64 * 8 + 2 * 128 * 8 + 64 * 16)
    assert s["engine_cycles"] == 3 * per_token == s["engine_dense_cycles"]


def test_tern_trace_flag_writes_a_perfetto_timeline(capsys, hf_dir, tmp_path):
    trace = tmp_path / "tern.json"
    rc = main(["generate", str(hf_dir), "--prompt-ids", "5,17", "--max-new-tokens", "3", "--target", "tern",
               "--trace", str(trace), "--ignore-eos"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "cycles_per_token.fabric-ffn-glue" in err  # the tern timing figures, tiered, on stderr
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("ph") == "X" and e.get("dur", 0) > 0 for e in events)


def test_trace_on_a_target_without_timing_is_a_one_line_error(capsys, hf_dir, tmp_path):
    rc = main(["generate", str(hf_dir), "--prompt-ids", "5", "--max-new-tokens", "1", "--target", "quant",
               "--trace", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("npukit: error:") and err.count("\n") == 1


def test_generate_reads_a_tq1_0_gguf_file_like_its_safetensors(capsys, tmp_path):
    c = tiny.config("offline", hidden_size=256, intermediate_size=512, head_dim=64)
    sd, tern = tiny.ternary_weights(c, seed=3)
    st = _gen(capsys, tiny.write_offline(tmp_path / "hf", c, sd, tern), "tern", 4)
    gg = _gen(capsys, tiny.write_gguf(tmp_path / "m.gguf", c, sd, tern, "TQ1_0"), "tern", 4)
    assert gg["tokens"] == st["tokens"] and gg["logits"] == st["logits"]


def test_an_unknown_single_file_is_a_one_line_error(capsys, tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"\0" * 16)
    assert main(["generate", str(f), "--prompt-ids", "1"]) == 2
    err = capsys.readouterr().err
    assert "not a model directory or a known single-file format (.gguf)" in err and err.count("\n") == 1
