"""Perplexity of GGUF LLMs: the scoring arithmetic against an independent float64 formula (SciPy's
logsumexp), golden's perplexity against transformers' loss on the same window, and bad input."""

import math
from pathlib import Path

import numpy as np
import pytest

from npukit.errors import ConfigError
from npukit.models.gguf.installed import installed_gguf
from npukit.models.loading import load_model
from npukit.runtime.llm_eval import perplexity, token_nll

GPL3 = "/usr/share/common-licenses/GPL-3"


def test_token_nll_matches_logsumexp() -> None:
    scipy_special = pytest.importorskip("scipy.special")
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((7, 50)) * 30).astype(np.float32)
    targets = rng.integers(0, 50, 7)
    expect = scipy_special.logsumexp(logits.astype(np.float64), axis=-1) - logits[np.arange(7), targets]
    assert np.allclose(token_nll(logits, targets), expect, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_golden_perplexity_equals_transformers_loss() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = installed_gguf("smollm2")
    model = load_model(path)
    window = 96
    result = perplexity(model, GPL3, "golden", None, window)
    assert result.tokens == window and result.kv == "fp32"
    ids = model.tokenizer.encode(Path(GPL3).read_text()).ids[:window]
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        loss = float(hf(torch.tensor([ids]), labels=torch.tensor([ids])).loss)
    assert abs(math.log(result.perplexity) - loss) < 1e-4
    assert result.figures()["perplexity"].tier == "measured"


def test_bad_input_is_a_typed_error(tmp_path) -> None:
    model = load_model(installed_gguf("smollm2"))
    with pytest.raises(ConfigError, match="at least 2"):
        perplexity(model, GPL3, window=1)
    with pytest.raises(ConfigError, match="cannot read"):
        perplexity(model, tmp_path / "missing.txt")
    (tmp_path / "one.txt").write_text("")
    with pytest.raises(ConfigError, match="fewer than 2 tokens"):
        perplexity(model, tmp_path / "one.txt")
