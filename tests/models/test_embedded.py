"""The embedded default model: contents, every Gemma 3n feature on, generation, recorded numbers.

The recorded perplexity oracle is transformers' own forward pass on the shipped weights
(``scripts/eval_embedded.py --torch`` stores its per-window NLL in ``metrics.json``); npukit's
float reference and W4A8 reference are recomputed here.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from npukit.cli.main import main
from npukit.models import embedded
from npukit.models.gemma3n import Gemma3nConfig, Gemma3nReference
from npukit.models.gemma3n.config import FULL, SLIDING
from npukit.models.loading import load_model
from npukit.targets.pccx.gemma3n_quant import Gemma3nW4A8, Int4Store

ASSET_FILES = ("config.json", "model.safetensors", "tokenizer.json", "heldout.txt", "metrics.json",
               "README.md")


@pytest.fixture(scope="module")
def model():
    return load_model(embedded.default_model_dir())


def test_asset_files_and_size():
    root = embedded.default_model_dir()
    sizes = {f: (root / f).stat().st_size for f in ASSET_FILES}
    assert all(v > 0 for v in sizes.values())
    assert sum(sizes.values()) <= 10 * 2**20


def test_every_gemma3n_feature_is_on():
    raw = json.loads((embedded.default_model_dir() / "config.json").read_text())
    cfg = Gemma3nConfig.from_hf(raw)
    train_seq = embedded.metrics()["training"]["seq"]
    assert cfg.altup_num_inputs == 4
    assert cfg.laurel_rank > 0
    assert cfg.hidden_size_per_layer_input > 0 and cfg.vocab_size_per_layer_input > 0
    assert cfg.num_kv_shared_layers >= 2
    assert SLIDING in cfg.layer_types and FULL in cfg.layer_types
    assert cfg.sliding_window < train_seq
    assert any(p > 0 for p in cfg.activation_sparsity) and any(p == 0 for p in cfg.activation_sparsity)
    assert cfg.final_logit_softcapping is not None
    # the shared layers really reuse a producer of each type
    shared = range(cfg.first_kv_shared_layer, cfg.num_hidden_layers)
    assert {cfg.layer_types[i] for i in shared} == {SLIDING, FULL}
    assert all(cfg.kv_source[i] < cfg.first_kv_shared_layer for i in shared)


def test_window_nll_matches_direct_log_softmax():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((5, 11)) * 3
    ids = np.array([0, 3, 10, 2, 2, 7])
    got = embedded.window_nll(lambda _ids: logits, ids)
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    assert np.allclose(got, -np.log(p[np.arange(5), ids[1:]]), rtol=1e-12)


def test_heldout_windows_are_bos_delimited_documents():
    w = embedded.heldout_ids(2)
    assert w.shape == (2, 129)
    assert w[0, 0] == embedded.load_tokenizer().token_to_id("<bos>")
    assert np.array_equal(w[0, -1], w[1, 0])  # consecutive windows share the boundary token


@pytest.mark.slow
@pytest.mark.parametrize("target", [[], ["--target", "quant", "--kv", "int4"]])
def test_generate_cli_default_model_is_readable(capsys, target):
    rc = main(["generate", "--prompt", "def ", "--max-new-tokens", "40", *target])
    assert rc == 0
    text = capsys.readouterr().out
    assert len(text) > 40
    printable = sum(c.isprintable() or c in "\n\t" for c in text) / len(text)
    assert printable > 0.98 and text.isascii()
    words = {"self", "return", "if", "in", "for", "None", "the", "def", "is", "not", "=", "("}
    assert sum(w in text for w in words) >= 3  # Python-library-like, not random bytes


@pytest.mark.slow
def test_float_perplexity_matches_recorded_transformers_value(model):
    rec = embedded.metrics()["eval"]["torch"]["nll_first4_windows"]
    windows = embedded.heldout_ids(4)
    ref = Gemma3nReference(model.weights)

    def logits(ids):
        ref.reset()
        return ref.forward(ids, all_logits=True)

    ppl, _ = embedded.perplexity(logits, windows)
    want = math.exp(float(np.mean(rec)))
    assert abs(ppl / want - 1) < 2e-3
    assert ppl < 200  # it learned something: a uniform guess scores 4096 on these windows


@pytest.mark.slow
def test_w4a8_perplexity_within_5pct_and_greedy_agrees(model):
    # 2 windows = 256 teacher-forced positions of held-out text (>= 200 asked for)
    windows = embedded.heldout_ids(2)
    ref = Gemma3nReference(model.weights)
    q = Gemma3nW4A8(Int4Store(model.weights), kv="fp16")

    def run(m):
        def logits(ids):
            m.reset()
            return m.forward(ids, all_logits=True)
        return embedded.perplexity(logits, windows)

    ppl_f, greedy_f = run(ref)
    ppl_q, greedy_q = run(q)
    assert ppl_q / ppl_f <= 1.05
    assert np.mean(greedy_q == greedy_f) >= 0.90


def test_recorded_eval_meets_the_w4a8_targets():
    ev = embedded.metrics()["eval"]
    assert ev["positions"] >= 2000
    assert ev["w4a8_fp16"]["ratio_to_float"] <= 1.05
    assert ev["w4a8_fp16"]["greedy_agreement"] >= 0.90
    for kv in ("int8", "int4"):
        assert ev[f"w4a8_{kv}"]["ppl"] > 0
