"""Tokenizers from GGUF metadata give the same ids as transformers' GGUF tokenizer conversion
(`AutoTokenizer.from_pretrained(dir, gguf_file=...)`) on Debian's GPL-3 text (a few thousand tokens).

Vocabularies: the embedded model's trained byte-level BPE (4096 tokens, real merges) as a "gpt2"
tokenizer; SentencePiece-style "llama" vocabularies (``▁`` spaces, ``<0xNN>`` byte fallback, scores)
from a BPE trained here on other licence texts, stored with and without merges, and as a Gemma 3 file
(runs of spaces stored as spaces, no merges)."""

import json
from pathlib import Path

import gguf
import pytest

from npukit.errors import ModelError
from npukit.models.embedded import default_model_dir
from npukit.models.gguf import GGUFFile
from npukit.models.gguf.tokenizer import tokenizer_from_gguf

transformers = pytest.importorskip("transformers")
GPL3 = Path("/usr/share/common-licenses/GPL-3")
TRAIN_TEXTS = [Path("/usr/share/common-licenses") / n for n in ("Apache-2.0", "GFDL-1.3", "LGPL-2.1")]
NORMAL, CONTROL, USER_DEFINED, BYTE = 1, 3, 4, 6


def gpl_text() -> str:
    return GPL3.read_text()[:20000]


def write(path: Path, arch: str, kv: dict) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_tokenizer_model(kv["model"])
    if "pre" in kv:
        w.add_tokenizer_pre(kv["pre"])
    w.add_token_list(kv["tokens"])
    w.add_token_types(kv["types"])
    if "scores" in kv:
        w.add_token_scores(kv["scores"])
    if "merges" in kv:
        w.add_token_merges(kv["merges"])
    w.add_bos_token_id(kv["bos"])
    w.add_eos_token_id(kv["eos"])
    if "unk" in kv:
        w.add_unk_token_id(kv["unk"])
    for key, value in kv.get("flags", {}).items():
        getattr(w, f"add_add_{key}_token")(value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def gpt2_vocab() -> dict:
    tj = json.loads((default_model_dir() / "tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    specials = {a["content"] for a in tj["added_tokens"] if a["special"]}
    merges = [" ".join(m) if isinstance(m, list) else m for m in tj["model"]["merges"]]
    return {"model": "gpt2", "tokens": tokens, "merges": merges,
            "types": [CONTROL if t in specials else NORMAL for t in tokens],
            "bos": tokens.index("<bos>"), "eos": tokens.index("<eos>")}


def sentencepiece_vocab(size: int = 3000) -> dict:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    # split=False keeps runs of spaces and words together, as SentencePiece does; limit piece length
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=[], max_token_length=12,
                                  show_progress=False)
    tok.train([str(p) for p in TRAIN_TEXTS], trainer)
    model = json.loads(tok.to_str())["model"]
    pieces = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), *pieces, "<think>"]
    merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
    return {"model": "llama", "tokens": tokens, "merges": merges, "unk": 0, "bos": 1, "eos": 2,
            "scores": [0.0] * 259 + [-float(i) for i in range(len(pieces))] + [0.0],
            "types": [2, CONTROL, CONTROL, *[BYTE] * 256, *[NORMAL] * len(pieces), USER_DEFINED]}


def hf_tokenizer(path: Path):
    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def ours(path: Path):
    return tokenizer_from_gguf(GGUFFile(path).meta)


@pytest.mark.hf
@pytest.mark.slow  # transformers' import is ~10 s here; each case then ~1 s
@pytest.mark.parametrize("pre", [None, "smollm", "llama-bpe", "qwen2"])
def test_gpt2_byte_level_ids_equal_transformers(tmp_path, pre):
    kv = gpt2_vocab() | ({"pre": pre} if pre else {})
    path = write(tmp_path / "g.gguf", "llama", kv)
    text = gpl_text() + "<eos>and<bos> more"  # control tokens in the text stay whole
    tok, info = ours(path)
    ids = tok.encode(text).ids
    assert len(ids) > 3000 and info.add_bos is False
    hf = hf_tokenizer(path)
    assert ids == hf(text)["input_ids"]
    assert {kv["bos"], kv["eos"]} <= set(ids[-6:])
    assert tok.decode(ids) == hf.decode(ids, skip_special_tokens=True) == text.replace("<eos>", "").replace(
        "<bos>", "")


@pytest.mark.hf
@pytest.mark.slow
@pytest.mark.parametrize("variant", ["scores-only", "tied-scores", "with-merges", "gemma3", "add-eos"])
def test_sentencepiece_llama_ids_equal_transformers(tmp_path, variant):
    kv = sentencepiece_vocab()
    arch = "llama"
    if variant != "with-merges":
        del kv["merges"]
    if variant == "gemma3":
        arch = "gemma3"
        kv["tokens"] = [" " * len(t) if len(t) > 1 and set(t) == {"\u2581"} else t for t in kv["tokens"]]
        # Gemma marks runs of spaces user-defined: under their file spelling they are not in the vocabulary
        kv["types"] = [USER_DEFINED if t.startswith("  ") else k
                       for t, k in zip(kv["tokens"], kv["types"], strict=True)]
        assert "  " in kv["tokens"]  # the respelling case is exercised
    if variant == "tied-scores":  # many merges rank equal: the tie order decides
        kv["scores"] = [0.0] * 259 + [-float(i // 64) for i in range(len(kv["tokens"]) - 259)]
        kv["tokens"][-1] = "\u2581a"  # a second copy of a piece: the last id wins, as in transformers
        kv["types"][-1] = NORMAL
    if variant == "add-eos":
        kv["flags"] = {"bos": False, "eos": True}
    path = write(tmp_path / "s.gguf", arch, kv)
    text = gpl_text() + " caf\u00e9 \u2603 \U0001f600 <think>done"  # non-ASCII: byte fallback
    tok, info = ours(path)
    ids = tok.encode(text).ids
    assert len(ids) > 3000
    hf = hf_tokenizer(path)
    assert ids == hf(text)["input_ids"]
    assert (ids[0] == 1) == info.add_bos == (variant != "add-eos")
    assert (ids[-1] == 2) == info.add_eos == (variant == "add-eos")
    assert any(3 <= i < 259 for i in ids)  # some bytes fell back to <0xNN>
    if variant != "tied-scores":
        assert ids.count(len(kv["tokens"]) - 1) == 1  # the user-defined <think> stayed whole
    assert tok.decode(ids) == hf.decode(ids, skip_special_tokens=True)


def test_unsupported_or_broken_tokenizer_metadata_is_a_model_error():
    with pytest.raises(ModelError, match="tokenizer type 'bert' is not supported"):
        tokenizer_from_gguf({"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["a"]})
    with pytest.raises(ModelError, match=r"neither tokenizer\.ggml\.merges nor one score"):
        tokenizer_from_gguf({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a"]})
    with pytest.raises(ModelError, match="not a token id"):
        tokenizer_from_gguf({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["a", "b"],
                             "tokenizer.ggml.scores": [0.0, 0.0], "tokenizer.ggml.bos_token_id": 7})
