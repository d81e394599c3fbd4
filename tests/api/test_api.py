"""The Python API (`import npukit`): models of every kind, a compiled session's typed results,
the energy estimate and sweeps, each against a check that does not run the same code path twice."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter as LiteRT
from ai_edge_litert.interpreter import OpResolverType

import npukit
from npukit.models.tflite import digits


def test_import_npukit_loads_no_api_until_used() -> None:
    code = ("import sys, npukit; assert 'npukit.api' not in sys.modules; npukit.load_model; "
            "assert 'npukit.api' in sys.modules; assert 'numba' not in sys.modules; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
    assert set(npukit.__all__) <= set(dir(npukit))
    with pytest.raises(AttributeError):
        _ = npukit.no_such_thing


def test_load_model_kinds_and_typed_errors(tmp_path) -> None:
    default = npukit.load_model()  # (a 2B preset builds its synthetic weights for ~1 min: not here)
    assert isinstance(default, npukit.Model) and default.family == "gemma3n"
    assert default.origin == "checkpoint" and "pccx" in default.targets()
    assert "bitnet-b1.58-2b-4t" in npukit.model_presets() and "tern" in npukit.list_targets()
    tfl = npukit.load_model("zoo:digits")
    assert isinstance(tfl, npukit.TfliteModel) and tfl.inputs[0].shape == (1, 8, 8, 1)
    with pytest.raises(npukit.ConfigError, match="no model directory or preset"):
        npukit.load_model("no-such-model")
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(npukit.ModelError, match="not a JSON object"):
        npukit.load_model(tmp_path)
    with pytest.raises(npukit.ConfigError, match="unknown target"):
        npukit.compile_model(None, "no-such-target")
    with pytest.raises(npukit.ConfigError, match="does not take trace"):
        npukit.compile_model(None, "golden", trace=tmp_path / "t.json")


def test_tflite_run_agrees_with_litert() -> None:
    model = npukit.load_model("zoo:digits")
    assert isinstance(model, npukit.TfliteModel)
    x = np.random.default_rng(0).integers(-128, 128, size=(1, 8, 8, 1), dtype=np.int8)
    ours = model.run({"image": x})
    ref = LiteRT(model_path=str(digits.asset_dir() / "digits_int8.tflite"),
                 experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    ref.allocate_tensors()
    ref.set_tensor(ref.get_input_details()[0]["index"], x)
    ref.invoke()
    expect = ref.get_tensor(ref.get_output_details()[0]["index"])
    np.testing.assert_array_equal(ours.outputs["probs"], expect)
    assert ours.ledger["run_wall_ms"].tier == "measured" and ours.host_ops == 4
    vta = model.run([x], target="vta")
    assert vta.delegated_ops > 0 and any(f.unit == "cycles" for f in vta.ledger.values())


@pytest.mark.slow
def test_pccx_session_matches_the_integer_reference_and_reports_cycles() -> None:
    model = npukit.load_model()
    session = npukit.compile_model(model, "pccx", hw="pccx-v002-kv260")
    gen = session.generate([2, 651], max_new_tokens=3, keep_logits=True)
    ref = npukit.generate(model, [2, 651], 3, target="quant", keep_logits=True)
    assert gen.tokens == ref.tokens and len(gen.tokens) == 3
    assert gen.logits is not None and gen.logits.shape == (3, model.vocab_size)
    assert [int(np.argmax(row)) for row in gen.logits] == gen.tokens  # greedy: each token is its row's max
    cyc = gen.cycles_per_token
    assert cyc is not None and cyc.unit == "cycles" and cyc.value == np.mean(gen.stats[
        "simulated_cycles_per_token"])
    assert gen.ledger["prefill_s"].tier == "measured"
    assert gen.text == model.decode(gen.tokens)
    assert ref.cycles_per_token is None  # the reference is not simulated hardware
    energy = session.estimate()  # the session's hardware, the context the generation reached
    assert session.hardware_name() == "pccx-v002-kv260" and energy.joules_per_token.value > 0
    assert f"context {len(gen.prompt_ids) + len(gen.tokens)}," in energy.ledger["tokens_per_second"].source


def test_estimate_energy_adds_up_and_sweep_front_is_not_dominated() -> None:
    rep = npukit.estimate("gemma3n-e4b", "pccx-v002-kv260", kv="int4", context=8192)
    led = rep.ledger
    assert rep.joules_per_token.value == pytest.approx(
        led["dynamic_joules_per_token"].value + led["static_joules_per_token"].value)
    assert rep.tokens_per_second.value == pytest.approx(1 / led["seconds_per_token"].value)
    assert rep.joules_per_token.tier == "projected"
    with pytest.raises(npukit.ConfigError, match="sparsity must be in"):
        npukit.estimate("gemma3n-e4b", "pccx-v002-kv260", sparsity=1.5)
    sw = npukit.sweep("gemma3n-e4b", "pccx-v002-kv260", {"clock_mhz": "100:400:4", "kv": ["int4", "int8"]})
    assert len(sw.rows) == 8
    for r in sw.front():
        assert not any(o["tokens_per_second"] > r["tokens_per_second"]
                       and o["joules_per_token"] < r["joules_per_token"] for o in sw.rows)
    hw = npukit.hardware("pccx-v002-kv260", {"gemv.cores_log2": 3})
    assert hw.gemv.cores_log2 == 3 and "pccx-v002-kv260" in npukit.hardware_presets()


def test_write_vectors_names_the_targets_that_export(tmp_path) -> None:
    with pytest.raises(npukit.ConfigError, match=r"has no golden-vector exporter \(have: pccx, tern\)"):
        npukit.write_vectors(None, tmp_path / "v", target="vta")
    assert not (tmp_path / "v").exists()  # nothing written before the target is checked
