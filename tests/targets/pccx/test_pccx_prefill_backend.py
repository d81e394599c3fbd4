"""`npukit generate --target pccx` with the GEMM prefill: same tokens and logits as the W4A8 reference
(``--target quant``) and as ``--prefill decode``; prefill cycles reported apart from decode (derived).
The embedded model: a prompt of 30 tokens prefilled in one GEMM chunk, bit-identical to the reference."""

from __future__ import annotations

import json

import numpy as np
import pytest

from npukit.cli.main import main
from npukit.models import embedded
from npukit.models.loading import load_model
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.gemma3n_quant import Gemma3nW4A8, Int4Store


def _gen(capsys, *argv):
    rc = main(["generate", *map(str, argv)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    return json.loads(cap.out)


@pytest.mark.slow
def test_generate_gemm_prefill_equals_quant_and_decode_prefill(capsys):
    prompt = ",".join(str(t) for t in range(40, 52))
    common = ["--prompt-ids", prompt, "--max-new-tokens", 3, "--ignore-eos", "--json", "--logits",
              "--kv", "int8"]
    q = _gen(capsys, "--target", "quant", *common)
    g = _gen(capsys, "--target", "pccx", *common)
    d = _gen(capsys, "--target", "pccx", "--prefill", "decode", *common)
    assert g["tokens"] == q["tokens"] == d["tokens"]
    for o in (g, d):
        assert np.array_equal(np.array(o["logits"], np.float32).view(np.uint32),
                              np.array(q["logits"], np.float32).view(np.uint32))
    bg, bd = g["stats"]["backend"], d["stats"]["backend"]
    assert bg["prefill"] == "gemm" and bd["prefill"] == "decode"
    assert [r["tokens"] for r in bg["simulated_prefill_runs"]] == [12]
    assert [r["tokens"] for r in bd["simulated_prefill_runs"]] == [1] * 12
    assert len(bg["simulated_cycles_per_token"]) == 2  # decode tokens only (the last needs no pass)
    fg, fd = bg["figures"], bd["figures"]
    for f in (fg, fd):
        assert f["prefill_cycles"]["tier"] == f["projected_prefill_tok_per_s"]["tier"] == "derived"
    # one GEMM per weight matrix for the chunk beats twelve decode programs on the simulated clock
    assert fg["prefill_cycles"]["value"] < fd["prefill_cycles"]["value"]
    assert fg["cycles_per_token"]["value"] == pytest.approx(fd["cycles_per_token"]["value"])
    assert bg["compile"]["prefill_chunk"]["instructions"]["gemm"] > 0


def test_unknown_prefill_mode_is_rejected(capsys):
    from npukit.errors import ConfigError
    from npukit.targets.pccx.backend import Gemma3nPccx

    with pytest.raises(SystemExit):  # argparse choices
        main(["generate", "--target", "pccx", "--prefill", "gemv", "--max-new-tokens", "1"])
    assert "--prefill" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="prefill mode"):
        Gemma3nPccx(load_model(embedded.default_model_dir()), prefill="gemv")


def test_prefill_option_on_a_target_without_it_is_rejected(capsys):
    rc = main(["generate", "gemma3n-e2b", "--target", "golden", "--prefill", "gemm", "--max-new-tokens", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "prefill" in err and err.count("\n") == 1


@pytest.mark.slow
def test_embedded_model_prompt_of_30_tokens_in_one_gemm_chunk():
    store = Int4Store(load_model(embedded.default_model_dir()).weights)
    prompt = [int(t) for t in embedded.heldout_ids(1, 31)[0][:30]]
    ref = Gemma3nW4A8(store, kv="int8")
    want = [ref.step(t) for t in prompt][-1]
    drv = PccxDriver().open().load(store).kv_init("int8").start()
    got = drv.prefill(prompt)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert [(r.position, r.tokens) for r in drv.records] == [(0, 30)]  # 30 < window 32 and T_max
    tok = int(np.argmax(want))
    for _ in range(3):
        w, g = ref.step(tok), drv.step(tok)
        assert np.array_equal(g.view(np.uint32), w.view(np.uint32))
        tok = int(np.argmax(w))
