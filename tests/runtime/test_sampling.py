"""Sampling against transformers' logits processors (independent oracle) and statistical checks."""

import numpy as np
import pytest
import torch
from transformers.generation.logits_process import (
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from npukit.errors import ConfigError
from npukit.runtime.sampling import Sampler, SamplingParams, apply_repetition_penalty, top_p_probs

pytestmark = pytest.mark.hf  # transformers / safetensors are the oracles


def test_repetition_penalty_matches_transformers():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(50).astype(np.float32) * 3
    seen = [3, 3, 7, 11, 49, 0]
    want = RepetitionPenaltyLogitsProcessor(1.15)(torch.tensor([seen]), torch.tensor(logits)[None])[0]
    got = apply_repetition_penalty(logits, seen, 1.15)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6)
    # every penalised token moved down, nothing else moved
    assert np.all(got[seen] < logits[seen]) and np.array_equal(np.delete(got, seen), np.delete(logits, seen))


@pytest.mark.parametrize("top_p", [0.3, 0.9, 0.999])
def test_top_p_set_matches_transformers(top_p):
    rng = np.random.default_rng(int(top_p * 1000))
    for _ in range(20):
        logits = rng.standard_normal(64).astype(np.float32) * 2
        t = torch.tensor(logits)[None]
        warped = TopPLogitsWarper(top_p)(None, TemperatureLogitsWarper(0.7)(None, t))[0]
        want = np.isfinite(warped.numpy())
        probs = top_p_probs(logits, 0.7, top_p)
        np.testing.assert_array_equal(probs > 0, want)
        assert probs.sum() == pytest.approx(1.0)
        full = torch.softmax(warped, -1).numpy()
        np.testing.assert_allclose(probs, full, atol=1e-6)


def test_greedy_is_argmax_and_seeded_sampling_reproducible():
    logits = np.array([0.1, 2.0, -1.0, 2.0, 0.5], np.float32)
    assert Sampler()(logits) == 1  # first of the tied maxima
    assert Sampler(SamplingParams(repetition_penalty=2.0))(logits, seen=[1]) == 3
    p = SamplingParams(temperature=1.0, top_p=1.0, seed=7)
    sa, sb = Sampler(p), Sampler(p)
    a = [sa(logits) for _ in range(50)]
    b = [sb(logits) for _ in range(50)]
    assert a == b and len(set(a)) > 2
    sc = Sampler(SamplingParams(temperature=1.0, seed=8))
    assert [sc(logits) for _ in range(50)] != a


def test_sampling_frequencies_follow_the_distribution():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05])).astype(np.float32)
    s = Sampler(SamplingParams(temperature=1.0, seed=3))
    draws = np.array([s(logits) for _ in range(4000)])
    freq = np.bincount(draws, minlength=4) / draws.size
    np.testing.assert_allclose(freq, [0.5, 0.3, 0.15, 0.05], atol=0.03)
    # top-p 0.7 keeps {0, 1} only (0.5 < 0.7 <= 0.8), renormalised to 5/8, 3/8
    s = Sampler(SamplingParams(temperature=1.0, top_p=0.7, seed=3))
    draws = np.array([s(logits) for _ in range(4000)])
    freq = np.bincount(draws, minlength=4) / draws.size
    assert freq[2] == freq[3] == 0
    np.testing.assert_allclose(freq[:2], [0.625, 0.375], atol=0.03)


@pytest.mark.parametrize("kw", [dict(temperature=-1), dict(top_p=0), dict(top_p=1.5),
                                dict(repetition_penalty=0), dict(temperature=float("nan"))])
def test_bad_params(kw):
    with pytest.raises(ConfigError):
        SamplingParams(**kw)
