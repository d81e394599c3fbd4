"""The two real checkpoints of the ``llm`` extra (Gemma 3 270M Q4_K_M, SmolLM2-135M-Instruct Q4_1) against
independent references: every tensor dequantised bit-identically to gguf-py's ``GGUFReader`` +
``gguf.quants.dequantize``; tokenizer ids equal to transformers' GGUF tokenizer on Debian's GPL-3 text
(about 4,200 tokens); the SmolLM2 chat template rendered as transformers' ``apply_chat_template``."""

from pathlib import Path

import numpy as np
import pytest

from npukit.errors import ModelError
from npukit.models.gguf import GGUFFile, tokenizer_from_gguf
from npukit.models.gguf.chat import apply_chat_template, chat_prompt
from npukit.models.gguf.installed import available, installed_gguf

gguf = pytest.importorskip("gguf")
GPL3 = Path("/usr/share/common-licenses/GPL-3")
MODELS = ["gemma3", "smollm2"]
MESSAGES = [{"role": "system", "content": "You answer in one word."},
            {"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "And a fruit?"}]


@pytest.fixture(scope="module", params=MODELS)
def path(request: pytest.FixtureRequest) -> Path:
    return installed_gguf(request.param)


def test_both_checkpoints_are_installed() -> None:
    assert sorted(available()) == MODELS


@pytest.mark.slow
def test_every_tensor_dequantises_like_gguf_py(path: Path) -> None:
    ours, ref = GGUFFile(path), gguf.GGUFReader(str(path))
    kinds = set()
    for t in ref.tensors:
        shape = tuple(reversed([int(d) for d in t.shape]))
        with np.errstate(all="ignore"):
            expect = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32).reshape(shape)
        got = ours.float32(t.name)
        assert got.shape == expect.shape, t.name
        assert np.array_equal(got.view(np.uint32), expect.view(np.uint32)), t.name
        kinds.add(t.tensor_type.name)
    # the files really exercise the block types (not only floats)
    assert kinds & {"Q4_1", "Q5_0", "Q4_K", "Q6_K"}
    assert len(ref.tensors) > 200


@pytest.mark.slow
def test_tokenizer_ids_equal_transformers_on_gpl3(path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    text = GPL3.read_text()[:20000]
    tok, _info = tokenizer_from_gguf(GGUFFile(path).meta)
    hf = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    ids = tok.encode(text).ids
    assert len(ids) > 4000
    assert ids == hf(text)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == hf.decode(ids, skip_special_tokens=True)


@pytest.mark.slow
def test_smollm2_chat_template_renders_like_transformers() -> None:
    transformers = pytest.importorskip("transformers")
    path = installed_gguf("smollm2")
    tok, info = tokenizer_from_gguf(GGUFFile(path).meta)
    hf = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    for gen in (True, False):
        ours = chat_prompt(tok, info, MESSAGES, add_generation_prompt=gen)
        assert ours == hf.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=gen)
    assert tok.encode(ours, add_special_tokens=False).ids == hf(ours, add_special_tokens=False)["input_ids"]


def test_base_model_without_template_is_a_model_error() -> None:
    _tok, info = tokenizer_from_gguf(GGUFFile(installed_gguf("gemma3")).meta)
    assert info.chat_template is None
    with pytest.raises(ModelError, match="no chat template"):
        apply_chat_template(info.chat_template, MESSAGES)


def test_template_raise_exception_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="roles must alternate"):
        apply_chat_template("{{ raise_exception('roles must alternate') }}", MESSAGES)


def test_unknown_installed_name_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="known: gemma3, smollm2"):
        installed_gguf("llama-70b")
