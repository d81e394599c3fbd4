"""The embedded default model: a tiny Gemma 3n trained on Python standard-library source.

It ships inside the package (``npukit/assets/gemma3n-tiny``: ``config.json``, ``model.safetensors``,
``tokenizer.json``, ``heldout.txt``, ``metrics.json``, ``README.md``) so that every command that
takes a model works offline with no argument. ``scripts/train_embedded.py`` trains it and
``scripts/eval_embedded.py`` measures it.

This module also holds the held-out perplexity evaluation used for the numbers in
``docs/models.md``: non-overlapping windows of the shipped held-out text, each run from an empty
KV cache, every next-token prediction scored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ModelError

ASSET = "gemma3n-tiny"
_FILES = ("config.json", "model.safetensors", "tokenizer.json")


def default_model_dir() -> Path:
    """Directory of the embedded model (a Hugging Face-style model folder)."""
    root = Path(str(resources.files("npukit") / "assets" / ASSET))
    missing = [f for f in _FILES if not (root / f).is_file()]
    if missing:
        raise ModelError(f"embedded model incomplete: {root} lacks {', '.join(missing)}")
    return root


def load_tokenizer(model_dir: Path | None = None):
    """The model's ``tokenizers.Tokenizer``."""
    from tokenizers import Tokenizer

    path = Path(model_dir or default_model_dir()) / "tokenizer.json"
    if not path.is_file():
        raise ModelError(f"no tokenizer.json in {path.parent}")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own Exception subclass
        raise ModelError(f"{path}: unreadable tokenizer ({str(exc).splitlines()[0]})") from None


def metrics() -> dict[str, Any]:
    """Recorded training and evaluation numbers (``metrics.json`` next to the weights)."""
    path = default_model_dir() / "metrics.json"
    if not path.is_file():
        raise ModelError(f"embedded model has no metrics.json in {path.parent}")
    return json.loads(path.read_text())


def heldout_ids(windows: int, seq: int = 128, model_dir: Path | None = None) -> np.ndarray:
    """The first ``windows`` evaluation windows of the held-out text, as [windows, seq + 1] token ids.

    The held-out text is the shipped ``heldout.txt`` (standard-library files never trained on); it is
    tokenized file by file, each as ``<bos> text <eos>``, as in training."""
    root = Path(model_dir or default_model_dir())
    path = root / "heldout.txt"
    if not path.is_file():
        raise ModelError(f"no heldout.txt in {root}")
    tok = load_tokenizer(root)
    bos, eos = tok.token_to_id("<bos>"), tok.token_to_id("<eos>")
    ids: list[int] = []
    for part in path.read_text(encoding="utf-8").split("\x00"):  # NUL separates files
        if part:
            ids += [bos, *tok.encode(part).ids, eos]
    need = windows * seq + 1
    if len(ids) < need:
        raise ModelError(f"held-out text has {len(ids)} tokens, {need} needed for {windows} windows")
    arr = np.asarray(ids[:need], dtype=np.int64)
    return np.stack([arr[w * seq:(w + 1) * seq + 1] for w in range(windows)])


def window_nll(step_logits: Callable[[Sequence[int]], np.ndarray], ids: np.ndarray) -> np.ndarray:
    """Per-position next-token negative log-likelihood (float64) for one window of ids [n + 1].

    ``step_logits(ids[:-1])`` returns the logits after every one of those n tokens: [n, vocab]."""
    logits = np.asarray(step_logits(list(ids[:-1])), dtype=np.float64)
    if logits.ndim != 2 or logits.shape[0] != len(ids) - 1:
        raise ModelError(f"logits shape {logits.shape} does not match {len(ids) - 1} positions")
    m = logits.max(axis=1, keepdims=True)
    lse = (m[:, 0] + np.log(np.exp(logits - m).sum(axis=1)))
    return lse - logits[np.arange(len(ids) - 1), ids[1:]]


def perplexity(step_logits: Callable[[Sequence[int]], np.ndarray], windows: np.ndarray
               ) -> tuple[float, np.ndarray]:
    """Perplexity over all positions of all windows, and the per-position greedy (argmax) tokens."""
    nll, greedy = [], []
    for w in windows:
        logits = np.asarray(step_logits(list(w[:-1])), dtype=np.float64)
        nll.append(window_nll(lambda _ids, lg=logits: lg, w))
        greedy.append(logits.argmax(axis=1))
    return math.exp(float(np.concatenate(nll).mean())), np.stack(greedy)
