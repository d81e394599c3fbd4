"""GPTQ calibration of a GGUF file: cached on disk by the file's content (a second run does not
calibrate, a changed file does, a damaged cache is remade), applied by the quant target to exactly the
matrices the policy re-quantises, better than round-to-nearest on the layer's real inputs, and run
bit-identically by the pccx target."""

from pathlib import Path

import numpy as np
import pytest

from npukit import hw as hwmod
from npukit.models.llm.reference import rms_norm
from npukit.models.llm.weights import open_gguf_llm
from npukit.targets.pccx.llm import calibration
from npukit.targets.pccx.llm.gptq import output_error
from npukit.targets.pccx.llm.model import LlmW4A8
from npukit.targets.pccx.llm.offload import LlmPccxOffload
from npukit.targets.pccx.llm.policy import requantize

from .tiny_llama import LAYERS, LOSSLESS, SHAPES, VOCAB, write_tiny_llama

WINDOWS = [np.random.default_rng(i).integers(0, VOCAB, 80) for i in range(3)]


@pytest.fixture
def tiny(tmp_path, monkeypatch) -> tuple[Path, list[int]]:
    """A tiny Llama file, npukit's cache in tmp_path, calibration token windows without a tokenizer
    (the file has none), and a count of the calibrations run."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(calibration, "calibration_windows", lambda meta, texts: WINDOWS)
    calls: list[int] = []
    real = calibration.calibrate
    monkeypatch.setattr(calibration, "calibrate", lambda w, win: calls.append(1) or real(w, win))
    return write_tiny_llama(tmp_path / "tiny.gguf"), calls


def _cached(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "cache" / "npukit" / "gguf-gptq").glob("*.npz"))


def test_calibration_is_cached_by_the_files_content(tiny, tmp_path) -> None:
    path, calls = tiny
    first = calibration.calibrated_matrices(open_gguf_llm(path)[1])
    expected = {f"blk.{i}.{p}.weight" for i in range(LAYERS) for p in SHAPES} - {LOSSLESS}
    assert set(first) == expected and calls == [1] and len(_cached(tmp_path)) == 1
    second = calibration.calibrated_matrices(open_gguf_llm(path)[1])
    assert calls == [1]  # loaded, not calibrated again
    for name, g in first.items():
        h = second[name]
        assert np.array_equal(g.codes, h.codes) and np.array_equal(g.scale, h.scale)
        assert np.array_equal(g.offset, h.offset) and h.source == g.source == "Q8_0 -> INT4 affine GPTQ"
    _cached(tmp_path)[0].write_bytes(b"not a zip")  # damaged: made again
    calibration.calibrated_matrices(open_gguf_llm(path)[1])
    assert calls == [1, 1]
    other = write_tiny_llama(tmp_path / "other.gguf", seed=1)  # other bytes: another entry
    calibration.calibrated_matrices(open_gguf_llm(other)[1])
    assert calls == [1, 1, 1] and len(_cached(tmp_path)) == 2


def test_quant_target_uses_gptq_where_the_policy_requantises(tiny) -> None:
    path, _calls = tiny
    _cfg, weights, _g = open_gguf_llm(path)
    model = LlmW4A8(weights)
    assert model.matrix("blk.0.attn_q.weight").source == "Q8_0 -> INT4 affine GPTQ"
    assert model.matrix(LOSSLESS).source == "Q4_0 lossless"
    assert model.matrix("token_embd.weight").source == "Q8_0 lossless"  # kept at 8 bits
    assert LlmW4A8(weights, keep_int8={"q"}).matrix("blk.0.attn_q.weight").fmt == "int8"
    assert LlmW4A8(weights, policy="gguf").matrix("blk.0.attn_q.weight").source == "Q8_0 -> INT4 affine fit"
    # layer 0's q input, computed here from the embedding and the norm: GPTQ beats round-to-nearest on it
    x = np.concatenate([rms_norm(weights.embedding[w], weights.block(0, "attn_norm"), 1e-5, False)
                        for w in WINDOWS])
    for role in ("q", "k", "v"):
        w = weights.block(0, role)
        ours = output_error(x, w, model.matrix(weights.name(0, role)).dequantize())
        assert ours < 0.95 * output_error(x, w, requantize(w, "int4", "Q8_0").dequantize())


def test_without_calibration_text_or_tokenizer_the_policy_rounds_to_nearest(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    _cfg, weights, _g = open_gguf_llm(write_tiny_llama(tmp_path / "t.gguf"))
    model = LlmW4A8(weights)  # the file has no tokenizer metadata
    assert model.matrix("blk.0.ffn_up.weight").source == "Q8_0 -> INT4 affine fit"
    assert "no tokenizer" in model.calibration_note and not _cached(tmp_path)


@pytest.mark.slow
def test_pccx_logits_equal_quant_with_gptq_matrices(tiny) -> None:
    path, calls = tiny
    _cfg, weights, _g = open_gguf_llm(path)
    quant = LlmW4A8(weights, kv="int8")
    pccx = LlmPccxOffload(weights, hwmod.load_hw("pccx-v002-kv260", [], expect="pccx"), kv="int8")
    ids = [3, 17, 42, 5]
    a, b = quant.prefill(ids), pccx.prefill(ids)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    a, b = quant.step(7), pccx.step(7)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert pccx.matrix("blk.1.ffn_down.weight").source.endswith("GPTQ") and calls == [1]
