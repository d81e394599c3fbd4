"""Calibration for GPTQ re-quantisation of GGUF LLM matrices, cached on disk (docs/models.md, "GPTQ").

The float model (`LlmReference`) runs over calibration text one layer at a time: every window passes
through layer L, the Hessians ``H = Σ xᵀx / ‖x‖²`` of that layer's matrix inputs are summed, the layer's
re-quantised matrices are rounded by `gptq.gptq_affine`, and the windows go on to layer L + 1 (float
activations throughout). Only matrices the policy re-quantises to INT4 are calibrated (not the
lossless Q4_0 / Q4_1 / Q4_K ones, not the tied embedding / LM head).

Calibration text, kept apart from every evaluation text in docs/models.md (Debian's GPL-3 and
Apache-2.0): Debian's ``/usr/share/common-licenses/MPL-2.0`` (base-files) and CPython's own language
reference prose (``pydoc_data.topics``: "execmodel", "naming", "import"), two windows of 512 tokens
each, 2 048 tokens in all. A source that is missing is skipped; with none left there is no
calibration (`CalibrationUnavailable`, the policy falls back to round-to-nearest).

The result is cached in ``~/.cache/npukit/gguf-gptq/`` under the SHA-256 of the GGUF file, the
calibration texts and `CALIBRATION_VERSION`, so a second run loads it in about a second.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ModelError
from npukit.formats import int4
from npukit.models.llm.reference import LlmReference
from npukit.models.llm.weights import LlmWeights
from npukit.progress import Progress
from npukit.sim.cpu import cache_dir
from npukit.targets.pccx.llm.gptq import gptq_affine
from npukit.targets.pccx.llm.policy import GROUP, LOSSLESS_INT4, affine_fit
from npukit.targets.pccx.llm.w4a8 import GroupedMatrix

CALIBRATION_VERSION = 3  # bump when the algorithm, its settings or the texts' selection change
DEBIAN_TEXT = Path("/usr/share/common-licenses/MPL-2.0")
PYDOC_TOPICS = ("execmodel", "naming", "import")
WINDOW = 512  # tokens per calibration window
WINDOWS_PER_TEXT = 2
# GPTQ settings, not in the cache key: bump CALIBRATION_VERSION with them. Natural column order and 1 %
# dampening measured best on both evaluation texts (act-order, 0.1 %, 10 %: docs/models.md, GPTQ)
ACT_ORDER = False
DAMP_SHARE = 0.01  # H's dampening, a share of its mean diagonal
# matrix role -> the role whose input it shares (one Hessian per distinct input)
INPUT_OF = {"q": "q", "k": "q", "v": "q", "o": "o", "gate": "gate", "up": "gate", "down": "down"}
SOURCE = "INT4 affine GPTQ"


class CalibrationUnavailable(ModelError):
    """No calibration text, or a file without a tokenizer: the policy rounds to nearest instead."""


def calibration_texts() -> list[tuple[str, str]]:
    """(name, text) of each calibration source present on this machine."""
    out = []
    if DEBIAN_TEXT.is_file():
        out.append((str(DEBIAN_TEXT), DEBIAN_TEXT.read_text(errors="replace")))
    try:
        from pydoc_data.topics import topics
    except ImportError:
        topics = {}
    prose = "\n\n".join(topics[t] for t in PYDOC_TOPICS if t in topics)
    if prose:
        out.append((f"pydoc_data.topics[{', '.join(PYDOC_TOPICS)}]", prose))
    if not out:
        raise CalibrationUnavailable(f"no calibration text here ({DEBIAN_TEXT}, pydoc_data)")
    return out


def calibration_windows(meta: dict, texts: list[tuple[str, str]]) -> list[np.ndarray]:
    """Token windows of each text, tokenised by the GGUF file's own tokenizer."""
    from npukit.models.gguf.tokenizer import tokenizer_from_gguf

    try:
        tok, info = tokenizer_from_gguf(meta)
    except ModelError as e:
        raise CalibrationUnavailable(f"no tokenizer for the calibration text: {e}") from e
    windows = []
    for _name, text in texts:
        ids = np.asarray(tok.encode(text).ids, np.int64)
        head, ids = (ids[:1], ids[1:]) if info.add_bos and ids.size else (ids[:0], ids)
        step = WINDOW - head.size  # every window starts as a sequence does (BOS: the attention sink)
        for lo in range(0, min(ids.size, step * WINDOWS_PER_TEXT), step):
            if ids.size - lo >= step // 4:
                windows.append(np.concatenate([head, ids[lo:lo + step]]))
    return windows


def needs_gptq(weights: LlmWeights, name: str) -> bool:
    """Does the policy re-quantise this block matrix to INT4 (its GGUF type is not 4-bit already)?"""
    return name.startswith("blk.") and weights.gguf.type_name(name) not in LOSSLESS_INT4


class _Recorder(LlmReference):
    """The float forward pass, summing ``xᵀx / ‖x‖²`` of each matrix input it is asked to record.

    Each token's input is normalised: every block output of these models is RMS-normalised again
    (Gemma's post-norms, the next pre-norm), so a token's *relative* error is what counts, and
    without it a few large-norm tokens set H while the attention-sink BOS token, whose inputs are
    small, got larger errors than round-to-nearest gives it (measured: Gemma 3 270M, docs)."""

    def __init__(self, weights: LlmWeights) -> None:
        super().__init__(weights, kv="fp32", linear=self._record)
        self.record: set[str] = set()
        self.hessians: dict[str, np.ndarray] = {}

    def _record(self, x: np.ndarray, name: str) -> np.ndarray:
        if name in self.record:
            x64 = np.asarray(x, np.float64)
            norm = np.sqrt(np.maximum(np.einsum("ij,ij->i", x64, x64), 1e-30))
            xw = (x64 / norm[:, None]).astype(np.float32)  # every token counts alike (see above)
            h = (xw.T @ xw).astype(np.float64)
            self.hessians[name] = self.hessians[name] + h if name in self.hessians else h
        return x @ self.w.tensor(name).T

    def layer(self, layer: int, xs: list[np.ndarray]) -> list[np.ndarray]:
        out = []
        for x in xs:
            self.reset()
            out.append(self._block(layer, x, np.arange(x.shape[0])))
        return out


def _quantise_layer(rec: _Recorder, layer: int, xs: list[np.ndarray], got: dict[str, GroupedMatrix]
                    ) -> list[np.ndarray]:
    w = rec.w
    todo = {role: w.name(layer, role) for role in INPUT_OF if needs_gptq(w, w.name(layer, role))}
    rec.record = {w.name(layer, INPUT_OF[role]) for role in todo}
    rec.hessians = {}
    xs = rec.layer(layer, xs)
    for role, name in todo.items():
        h = rec.hessians[w.name(layer, INPUT_OF[role])]
        codes, scale, offset = gptq_affine(w.tensor(name), h, affine_fit, GROUP, DAMP_SHARE,
                                           act_order=ACT_ORDER)
        got[name] = GroupedMatrix(codes, scale, GROUP, "int4", offset,
                                  f"{w.gguf.type_name(name)} -> {SOURCE}")
    return xs


def calibrate(weights: LlmWeights, windows: list[np.ndarray]) -> dict[str, GroupedMatrix]:
    """GPTQ INT4 matrices (by GGUF tensor name) for every block matrix the policy re-quantises."""
    rec = _Recorder(weights)
    c = weights.cfg
    xs = []
    for ids in windows:
        x = rec.embed(ids)
        xs.append(x * np.float32(c.hidden_size ** 0.5) if c.gemma else x)
    got: dict[str, GroupedMatrix] = {}
    with Progress(c.num_layers, f"GPTQ calibration ({sum(len(i) for i in windows)} tokens, cached)") as bar:
        for layer in range(c.num_layers):
            xs = _quantise_layer(rec, layer, xs, got)
            bar.update(1, f"layer {layer}")
    return got


def file_digest(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def cache_path(gguf_path: str | Path, texts: list[tuple[str, str]]) -> Path:
    """The cache file for one GGUF file and calibration set (content hashes, not names)."""
    h = hashlib.sha256(f"v{CALIBRATION_VERSION} {file_digest(gguf_path)}".encode())
    for name, text in texts:
        h.update(f"\0{name}\0{text}".encode())
    return cache_dir() / "gguf-gptq" / f"{h.hexdigest()[:32]}.npz"


def save(path: Path, got: dict[str, GroupedMatrix]) -> None:
    arrays = {}
    for i, (name, g) in enumerate(sorted(got.items())):
        assert g.offset is not None
        arrays.update({f"{i}.name": np.array(name), f"{i}.source": np.array(g.source),
                       f"{i}.codes": int4.pack_int4(g.codes), f"{i}.scale": g.scale, f"{i}.offset": g.offset})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, count=np.array(len(got)), **arrays)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load(path: Path) -> dict[str, GroupedMatrix]:
    with np.load(path) as z:
        return {str(z[f"{i}.name"]): GroupedMatrix(_codes(z, i), z[f"{i}.scale"], GROUP,
                                                   "int4", z[f"{i}.offset"], str(z[f"{i}.source"]))
                for i in range(int(z["count"]))}


def _codes(z: Any, i: int) -> np.ndarray:
    """The INT4 codes [M, K] of cached matrix ``i`` (K: two codes per stored byte, a group multiple)."""
    packed = z[f"{i}.codes"]
    return int4.unpack_int4(packed, (packed.shape[0], 2 * packed.shape[1]))


def calibrated_matrices(weights: LlmWeights) -> dict[str, GroupedMatrix]:
    """GPTQ matrices of a GGUF LLM: from the cache when this file and text were calibrated before,
    else calibrated now (minutes for Gemma 3 270M on 2 cores) and cached."""
    texts = calibration_texts()
    path = cache_path(weights.gguf.path, texts)
    if path.is_file():
        try:
            return load(path)
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache file is made again
    windows = calibration_windows(weights.gguf.meta, texts)
    if not windows:
        raise CalibrationUnavailable("the calibration texts gave no tokens")
    got = calibrate(weights, windows)
    save(path, got)
    return got
