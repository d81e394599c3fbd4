"""Backend registry and the generation loop (fake backends for the loop; golden vs transformers)."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from gemma3n_tiny import cached_dir, cached_greedy

from npukit.errors import ConfigError, ModelError
from npukit.models.loading import LoadedModel, load_model
from npukit.runtime import backends
from npukit.runtime.generate import generate
from npukit.runtime.sampling import SamplingParams

pytestmark = pytest.mark.hf  # transformers / safetensors are the oracles


class _Counting:
    """Fake backend: the logits favour (last token + 1) mod V; records every call."""

    def __init__(self, model, kv="a"):
        self.v, self.kv, self.calls = model.config.vocab_size, kv, []

    def _logits(self, last):
        z = np.zeros(self.v, np.float32)
        z[(last + 1) % self.v] = 5.0
        return z

    def reset(self):
        self.calls.append(("reset",))

    def prefill(self, ids):
        self.calls.append(("prefill", list(ids)))
        return self._logits(ids[-1])

    def step(self, tok):
        self.calls.append(("step", tok))
        return self._logits(tok)

    def stats(self):
        return {"kv": self.kv, "calls": len(self.calls)}


class _Cfg:
    vocab_size = 10
    eos_token_ids = (6,)


def _fake_model():
    return LoadedModel("_fake", "fake", _Cfg(), None)


@pytest.fixture
def fake_backend():
    spec = backends.register_backend("_fake", "count", _Counting, kv_modes=("a", "b"), help="test")
    yield spec
    backends._REGISTRY.pop(("_fake", "count"))


def test_registry(fake_backend):
    assert "golden" in backends.targets("gemma3n") and "count" in backends.targets()
    assert backends.targets("_fake") == ["count"]
    assert {"a", "b", "fp32", "fp16"} <= set(backends.kv_modes())
    b = backends.create_backend(_fake_model(), "count")
    assert b.kv == "a" and isinstance(b, backends.Backend)
    assert backends.create_backend(_fake_model(), "count", kv="b").kv == "b"
    with pytest.raises(ConfigError, match="does not support --kv int4"):
        backends.create_backend(_fake_model(), "count", kv="int4")
    with pytest.raises(ConfigError, match=r"no backend for model family '_fake'.*available: count"):
        backends.create_backend(_fake_model(), "golden")


def test_listing_the_targets_imports_no_kernels():
    """Every backend registers without importing its engine: ``npukit generate`` on the golden target (and
    its --help) lists --target's choices without numba, the pccx compiler or the pccx LLM models (~0.25 s of
    each such run)."""
    import subprocess

    engines = ("numba", "npukit.targets.pccx.driver", "npukit.targets.pccx.llm.model")
    code = ("import json, sys\nfrom npukit.runtime import backends\n"
            f"print(json.dumps([backends.targets(), [m for m in {engines!r} if m in sys.modules]]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    listed, imported = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"pccx", "golden"} <= set(listed)
    assert imported == []


def test_loop_stops_keeps_logits_and_reports(fake_backend):
    b = backends.create_backend(_fake_model(), "count")
    seen = []
    r = generate(b, [2, 3], 10, stop_ids=(6,), keep_logits=True, on_token=seen.append, vocab_size=10)
    assert r.tokens == seen == [4, 5, 6] and r.stop_reason == "stop_token"
    assert b.calls == [("reset",), ("prefill", [2, 3]), ("step", 4), ("step", 5)]
    assert [int(np.argmax(x)) for x in r.logits] == r.tokens
    j = r.to_json(with_logits=True)
    assert j["tokens"] == [4, 5, 6] and len(j["logits"]) == 3 and len(j["logits"][0]) == 10
    figs = j["stats"]["figures"]
    assert figs["wall_s"]["tier"] == "measured" and figs["peak_rss_mib"]["tier"] == "measured"
    assert figs["decode_tok_per_s"]["tier"] == "derived" and figs["peak_rss_mib"]["value"] > 1
    assert j["stats"]["backend"] == {"kv": "a", "calls": 4}
    # without a stop token it runs to the limit, and the last token costs no forward pass
    r = generate(b, [2], 4)
    assert r.tokens == [3, 4, 5, 6] and r.stop_reason == "length"
    assert [c[0] for c in b.calls[-5:]] == ["reset", "prefill", "step", "step", "step"]
    with pytest.raises(ConfigError, match="logits were not kept"):
        r.to_json(with_logits=True)


def test_loop_rejects_bad_prompts(fake_backend):
    b = backends.create_backend(_fake_model(), "count")
    with pytest.raises(ConfigError, match="empty prompt"):
        generate(b, [], 3)
    with pytest.raises(ModelError, match="token id 10 out of range"):
        generate(b, [1, 10], 3, vocab_size=10)


def test_golden_generate_matches_transformers_greedy():
    prompt = (9, 8, 7, 6, 5, 40, 41, 42)
    toks, logits = cached_greedy(0, prompt, 26)
    model = load_model(cached_dir(0))
    b = backends.create_backend(model, "golden")
    r = generate(b, prompt, 26, SamplingParams(), keep_logits=True)
    assert r.tokens == toks
    np.testing.assert_allclose(np.stack(r.logits), logits, atol=1e-4, rtol=0)
    assert r.backend_stats["kv_bytes"] > 0 and r.backend_stats["target"] == "golden"
    # reset between runs: a second run is identical
    assert generate(b, prompt, 26).tokens == toks


def test_long_lived_frozen_defers_full_collections_and_restores_the_collector():
    import gc

    from npukit.runtime.generate import long_lived_frozen

    before = gc.get_threshold()
    with long_lived_frozen():
        assert gc.get_threshold()[2] >= 1 << 30 and gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_an_acyclic_backend_has_each_step_frozen_and_the_collector_restored(fake_backend):
    """A backend whose steps leave no cycles (``acyclic_steps``) has what its prompt and each step kept
    frozen after them (never rescanned by young collections) and a higher young threshold; the frozen
    set and the thresholds are as before afterwards. Without the flag nothing is frozen per step."""
    import gc
    import itertools

    from npukit.runtime.generate import YOUNG_THRESHOLD

    class Acyclic(_Counting):
        acyclic_steps = True

        def __init__(self, model, kv="a"):
            super().__init__(model, kv)
            self.kept, self.seen = [], []

        def prefill(self, ids):
            self.prompt = (gc.get_freeze_count(), gc.get_threshold())
            self.kept.append([[i] for i in range(500)])  # the prompt's plans, kept
            return super().prefill(ids)

        def step(self, tok):
            self.seen.append((gc.get_freeze_count(), gc.get_threshold()[0]))
            self.kept.append([[i] for i in range(50)])  # tracked objects the backend keeps
            return super().step(tok)

    class Plain(Acyclic):
        acyclic_steps = False

    before = gc.get_threshold()
    for cls, frozen in ((Acyclic, True), (Plain, False)):
        b = cls(_fake_model())
        generate(b, [1, 2], 6)
        counts = [c for c, _ in b.seen]
        grows = all(later > earlier for earlier, later in itertools.pairwise(counts))
        assert grows is frozen and len(counts) == 5
        # the prompt runs under the same collector: what was made before it frozen, full collections
        # deferred; an acyclic backend's prompt leaves what it kept frozen before the first step
        assert b.prompt[0] > 0 and b.prompt[1][2] >= 1 << 30
        assert (counts[0] >= b.prompt[0] + 500) is frozen
        assert all(t == (max(before[0], YOUNG_THRESHOLD) if frozen else before[0]) for _, t in b.seen)
        assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
