"""The tokenizer a GGUF file describes in its ``tokenizer.ggml.*`` metadata, as a ``tokenizers.Tokenizer``.

Built to give the same ids as transformers' GGUF tokenizer conversion (`AutoTokenizer.from_pretrained(
dir, gguf_file=...)`, transformers 5.x), which is what users compare against:

* ``llama`` (SentencePiece vocabulary): a BPE over the vocabulary with byte fallback (``<0xNN>``
  tokens) and unknown-piece fusing; text is prefixed with ``▁`` once and spaces become ``▁``. When the
  file lists no merges they are recovered from the vocabulary: every split of a token into two known
  tokens is a merge, ranked by the token's score (best first). Gemma files store runs of spaces as
  real spaces and score tokens out of merge order, so for Gemma architectures those tokens are
  respelled with ``▁`` and ranked by file position instead, with no prefix ``▁``.
* ``gpt2`` (byte-level BPE): tokens spelled in GPT-2's byte alphabet, the file's merges, and the
  pre-tokenizer split that ``tokenizer.ggml.pre`` names (GPT-2's own when it names none we know).

Control tokens (token type 3) are special and never split; user-defined ones (4) stay whole too. BOS
and EOS are added as ``tokenizer.ggml.add_bos_token`` / ``add_eos_token`` say (llama files add BOS
unless they say otherwise).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from npukit.errors import ModelError

CONTROL, USER_DEFINED = 3, 4
SP_SPACE = "\u2581"  # SentencePiece's visible space
_GEMMA_ARCHS = ("gemma", "gemma2", "gemma3")

# pre-tokenizer splits by ``tokenizer.ggml.pre`` name (the regexes of tiktoken-style vocabularies)
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_CASED_WORD = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+{suffix}"
               r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*{suffix}")
_GPT4O = (_CASED_WORD.replace("{suffix}", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?")
          + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = (_CASED_WORD.replace("{suffix}", "")
           + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_SPLITS = {
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                     "lfm2", "jina-v5-nano", "dbrx", "smaug-bpe"), _LLAMA3),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez"), _QWEN2),
    **dict.fromkeys(("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), _GPT4O),
    "tekken": _TEKKEN,
}


@dataclass(frozen=True)
class GGUFTokenizerInfo:
    """What the metadata says besides the vocabulary: special ids and the chat template."""

    model: str
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    add_eos: bool
    chat_template: str | None


def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte → printable character map: printable Latin-1 bytes stand for themselves, the
    other 68 bytes take the characters from U+0100 upwards in byte order."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    spelling = {b: chr(b) for b in keep}
    extra = (b for b in range(256) if b not in spelling)
    spelling.update({b: chr(0x100 + i) for i, b in enumerate(extra)})
    return dict(sorted(spelling.items()))


def derive_merges(tokens: Sequence[str], vocab: dict[str, int],
                  rank: dict[str, float]) -> list[tuple[str, str]]:
    """Merges implied by a vocabulary without a merge list: each split of a token into two tokens,
    best ``rank`` first; ties go to the longer left part, then the longer right part, then the
    token that comes first in the file."""
    found: list[tuple[float, int, int, int, str, str]] = []
    for order, token in enumerate(dict.fromkeys(tokens)):
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                found.append((-rank[token], -len(left), -len(right), order, left, right))
    found.sort(key=lambda f: f[:4])  # (one token's splits never tie: their left lengths differ)
    return [(f[4], f[5]) for f in found]


def _meta_tokens(meta: dict[str, Any]) -> list[str]:
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise ModelError("GGUF metadata tokenizer.ggml.tokens is missing or not a list of strings")
    return tokens


def _file_merges(meta: dict[str, Any]) -> list[tuple[str, str]] | None:
    merges = meta.get("tokenizer.ggml.merges")
    if merges is None:
        return None
    pairs = [tuple(m.split(" ")) for m in merges]
    if any(len(p) != 2 for p in pairs):
        raise ModelError("GGUF metadata tokenizer.ggml.merges has an entry that is not 'left right'")
    return pairs  # type: ignore[return-value]


def _merges(meta: dict[str, Any], tokens: list[str], by_position: bool) -> list[tuple[str, str]]:
    """The file's merges, or those its vocabulary implies, ranked by score (or by file position)."""
    merges = _file_merges(meta)
    if merges is not None:
        return merges
    if by_position:
        rank: dict[str, float] = {t: -i for i, t in enumerate(tokens)}
    else:
        scores = meta.get("tokenizer.ggml.scores")
        if not isinstance(scores, list) or len(scores) != len(tokens):
            raise ModelError(f"GGUF {meta.get('tokenizer.ggml.model')} tokenizer has neither "
                             "tokenizer.ggml.merges nor one score per token")
        rank = dict(zip(tokens, (float(s) for s in scores), strict=True))
    return derive_merges(tokens, {t: i for i, t in enumerate(tokens)}, rank)


def _sentencepiece(meta: dict[str, Any], tokens: list[str], gemma: bool) -> Any:
    from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    if gemma:  # runs of spaces are stored as spaces; the BPE sees them as ▁
        tokens = [SP_SPACE * len(t) if " " in t and not t.strip() else t for t in tokens]
    vocab = {t: i for i, t in enumerate(tokens)}
    merges = _merges(meta, tokens, by_position=gemma)
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, fuse_unk=True, byte_fallback=True,
                        unk_token="<unk>" if gemma else None))
    steps = [decoders.Replace(SP_SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if gemma:
        tok.normalizer = normalizers.Replace(" ", SP_SPACE)
        tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP_SPACE, prepend_scheme="first",
                                                     split=False)
        steps.append(decoders.Strip(content=" ", left=1))
    tok.decoder = decoders.Sequence(steps)
    return tok


def _byte_level(meta: dict[str, Any], tokens: list[str]) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    spelling = byte_alphabet()
    alphabet = set(spelling.values())
    vocab = {t if set(t) <= alphabet else "".join(spelling[b] for b in t.encode("utf-8")): i
             for i, t in enumerate(tokens)}
    merges = _merges(meta, tokens, by_position=False)  # derived from the file's own spellings
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, continuing_subword_prefix="", end_of_word_suffix="",
                        fuse_unk=False))
    split = PRE_SPLITS.get(meta.get("tokenizer.ggml.pre", ""))
    if split is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    return tok


def _token_id(meta: dict[str, Any], key: str, n: int) -> int | None:
    v = meta.get(f"tokenizer.ggml.{key}")
    if v is None:
        return None
    if not isinstance(v, int) or not 0 <= v < n:
        raise ModelError(f"GGUF metadata tokenizer.ggml.{key} = {v!r} is not a token id below {n}")
    return v


def _add_special(tok: Any, tokens: list[str], meta: dict[str, Any], named: list[int | None]) -> None:
    from tokenizers import AddedToken

    types = meta.get("tokenizer.ggml.token_type") or []
    byte_level = meta.get("tokenizer.ggml.model") == "gpt2"
    alphabet = set(byte_alphabet().values())
    # a control token outside the byte alphabet of a byte-level vocabulary is a mislabel: skipped
    control = [t for t, k in zip(tokens, types, strict=False)
               if k == CONTROL and (not byte_level or set(t) <= alphabet)]
    control += [tokens[i] for i in named if i is not None and tokens[i] not in control]
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in control])
    # only those the vocabulary spells as the file does (a respelled one would get a new id)
    known = tok.get_vocab()
    user = [t for t, k in zip(tokens, types, strict=False) if k == USER_DEFINED and t in known]
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in user])


def tokenizer_from_gguf(meta: dict[str, Any]) -> tuple[Any, GGUFTokenizerInfo]:
    """A ``tokenizers.Tokenizer`` (BOS/EOS added as the file asks) and its `GGUFTokenizerInfo`."""
    from tokenizers import processors

    model = meta.get("tokenizer.ggml.model")
    if model not in ("llama", "gpt2"):
        raise ModelError(f"GGUF tokenizer type {model!r} is not supported (supported: llama, gpt2)")
    tokens = _meta_tokens(meta)
    arch = meta.get("general.architecture", "")
    if model == "llama":
        tok = _sentencepiece(meta, tokens, gemma=arch in _GEMMA_ARCHS)
    else:
        tok = _byte_level(meta, tokens)
    ids = {k: _token_id(meta, f"{k}_token_id", len(tokens)) for k in ("bos", "eos", "unknown", "padding")}
    _add_special(tok, tokens, meta, list(ids.values()))
    add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", model == "llama")) and ids["bos"] is not None
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False)) and ids["eos"] is not None
    bos = [(tokens[ids["bos"]], ids["bos"])] if add_bos else []  # type: ignore[index]
    eos = [(tokens[ids["eos"]], ids["eos"])] if add_eos else []  # type: ignore[index]
    single = " ".join([*(f"{t}:0" for t, _ in bos), "$A:0", *(f"{t}:0" for t, _ in eos)])
    pair = " ".join([single, *(f"{t}:1" for t, _ in bos), "$B:1", *(f"{t}:1" for t, _ in eos)])
    tok.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=bos + eos)
    info = GGUFTokenizerInfo(model, ids["bos"], ids["eos"], add_bos, add_eos,
                             meta.get("tokenizer.chat_template"))
    return tok, info
