"""Train the embedded default model: a tiny Gemma 3n with every architectural feature switched on.

Data: the top-level ``Lib/*.py`` sources of the running Python's standard library (code plus
docstrings), split by file into train and held-out sets. Tokenizer: byte-level BPE trained here with
the ``tokenizers`` package. Model: ``transformers.Gemma3nForCausalLM`` in float32 on CPU.

The last ``--qat-steps`` steps are quantization-aware: every weight the W4A8 reference stores as INT4
(all linear layers, the tied embedding / LM head, the per-layer embedding table) is replaced by its
INT4 fake-quantized value for the forward and backward pass and the gradient is applied to the float
master copy (straight-through estimator). The shipped weights are the master copy snapped onto that
INT4 grid (dequantized values, float16), so the float model and the W4A8 model share their weights.

Run (about 30 minutes on 2 threads)::

    .venv/bin/python scripts/train_embedded.py --out src/npukit/assets/gemma3n-tiny

This script needs the ``hf`` extra (torch, transformers, safetensors); npukit itself does not.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

VOCAB = 4096
SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>"]  # ids 0..3, Gemma's pad/eos/bos order
HELDOUT_EVERY = 10  # every 10th file (sorted by name, offset 5) is held out


def stdlib_files() -> tuple[list[Path], list[Path]]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in lib.glob("*.py") if p.is_file())
    train = [p for i, p in enumerate(files) if i % HELDOUT_EVERY != 5]
    held = [p for i, p in enumerate(files) if i % HELDOUT_EVERY == 5]
    return train, held


def read(p: Path) -> str:
    return p.read_text(encoding="utf-8", errors="replace")


def train_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def model_config() -> dict:
    """HF config.json content. 6 layers: sliding window 32 < context 128, full attention at 2 and 5,
    the last 2 layers reuse KV (layer 4 from 3, layer 5 from 2), Gaussian top-k on layers 0-1."""
    n = 6
    return {
        "architectures": ["Gemma3nForCausalLM"],
        "model_type": "gemma3n_text",
        "vocab_size": VOCAB,
        "vocab_size_per_layer_input": VOCAB,
        "hidden_size": 192,
        "hidden_size_per_layer_input": 32,
        "intermediate_size": [512] * n,
        "num_hidden_layers": n,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 48,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": 2,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "sliding_window": 32,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention",
                        "sliding_attention", "sliding_attention", "full_attention"],
        "rope_theta": 1_000_000.0,
        "rope_local_base_freq": 10_000.0,
        "final_logit_softcapping": 30.0,
        "altup_active_idx": 0,
        "altup_coef_clip": 120.0,
        "altup_correct_scale": True,
        "altup_num_inputs": 4,
        "num_kv_shared_layers": 2,
        "laurel_rank": 16,
        "activation_sparsity_pattern": [0.95, 0.95, 0.0, 0.0, 0.0, 0.0],
    }


def int4_fake(w, group: int | None = None):
    """Symmetric INT4 per output row (or per ``group`` columns): scale = max|w|/7, q in [-7, 7].
    Must match npukit.targets.pccx.gemma3n_quant's weight quantizer."""
    import torch

    shape = w.shape
    x = w.reshape(-1, group) if group else w.reshape(shape[0], -1)
    amax = x.abs().amax(dim=1, keepdim=True)
    scale = torch.where(amax > 0, amax / 7.0, torch.ones_like(amax))
    q = torch.clamp(torch.round(x / scale), -7, 7)
    return (q * scale).reshape(shape)


def quant_targets(model, cfg: dict) -> list[tuple[object, int | None]]:
    """(parameter, group) for every tensor the W4A8 reference stores as INT4."""
    import torch

    seen, out = set(), []
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) or name.endswith("embed_tokens"):
            p = mod.weight
            if id(p) not in seen:
                seen.add(id(p))
                out.append((p, None))
        elif name.endswith("embed_tokens_per_layer"):
            seen.add(id(mod.weight))
            out.append((mod.weight, cfg["hidden_size_per_layer_input"]))
    return out


def snap_to_int4_grid(path: Path, cfg: dict) -> int:
    """Rewrite a saved checkpoint so every tensor the W4A8 reference stores as INT4 (every matrix)
    holds its dequantized INT4 value (float16): the shipped float model is then exactly the model
    the W4A8 reference runs, as QAT intends. Returns the number of tensors snapped."""
    from safetensors.numpy import load_file, save_file

    from npukit.formats.int4 import dequantize_int4, quantize_int4

    tensors = load_file(str(path))
    n = 0
    for k, v in tensors.items():
        if v.ndim != 2:
            continue
        g = cfg["hidden_size_per_layer_input"] if k.endswith("embed_tokens_per_layer.weight") else None
        q, s = quantize_int4(v.astype(np.float32), group_size=g)
        tensors[k] = dequantize_int4(q, s, group_size=g).astype(np.float16)
        again, _ = quantize_int4(tensors[k].astype(np.float32), group_size=g)
        if not np.array_equal(again, q):  # float16 storage must not move any code
            raise SystemExit(f"{k}: INT4 codes change after float16 storage")
        n += 1
    save_file(tensors, str(path), metadata={"format": "pt"})
    return n


def batches(stream: np.ndarray, seq: int, batch: int, rng: np.random.Generator):
    import torch

    starts = rng.integers(0, len(stream) - seq - 1, size=batch)
    x = np.stack([stream[s:s + seq + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(x)


def evaluate(model, stream: np.ndarray, seq: int, windows: int) -> float:
    """Mean next-token NLL over the first ``windows`` non-overlapping windows of held-out text."""
    import torch

    model.eval()
    tot, n = 0.0, 0
    with torch.no_grad():
        for w in range(windows):
            ids = torch.from_numpy(stream[w * seq:(w + 1) * seq + 1].astype(np.int64))[None]
            logits = model(input_ids=ids[:, :-1]).logits.float()
            nll = torch.nn.functional.cross_entropy(logits[0], ids[0, 1:], reduction="sum")
            tot += float(nll)
            n += seq
    model.train()
    return tot / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="src/npukit/assets/gemma3n-tiny")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--qat-steps", type=int, default=300)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-minutes", type=float, default=35.0,
                    help="stop the float phase early (QAT steps still run) to bound wall time")
    ap.add_argument("--eval-windows", type=int, default=32)
    ap.add_argument("--snap-only", action="store_true",
                    help="only snap an existing --out checkpoint onto the INT4 grid, then exit")
    args = ap.parse_args(argv)
    if args.snap_only:
        out = Path(args.out)
        cfg = json.loads((out / "config.json").read_text())
        print(f"snapped {snap_to_int4_grid(out / 'model.safetensors', cfg)} tensors")
        return 0

    import torch
    from safetensors.torch import save_file
    from transformers import Gemma3nForCausalLM, Gemma3nTextConfig

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    train_files, held_files = stdlib_files()
    train_texts = [read(p) for p in train_files]
    held_texts = [read(p) for p in held_files]
    tok = train_tokenizer(train_texts)
    tok.save(str(out / "tokenizer.json"))
    bos, eos = tok.token_to_id("<bos>"), tok.token_to_id("<eos>")
    # each file is one document: <bos> text <eos> (generation with no prompt starts from <bos>)
    train_stream = np.concatenate([np.array([bos, *tok.encode(t).ids, eos], np.int32) for t in train_texts])
    held_stream = np.concatenate([np.array([bos, *tok.encode(t).ids, eos], np.int32) for t in held_texts])
    nbytes_held = sum(len(t.encode()) for t in held_texts)
    print(f"tokenizer: vocab {tok.get_vocab_size()}, train {len(train_stream)} tokens "
          f"({len(train_files)} files), held-out {len(held_stream)} tokens ({len(held_files)} files, "
          f"{nbytes_held / len(held_stream):.2f} bytes/token), {time.time() - t0:.0f}s", flush=True)

    cfg = model_config()
    hf_cfg = Gemma3nTextConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")})
    model = Gemma3nForCausalLM(hf_cfg).float()
    with torch.no_grad():  # zero-initialised by HF; randomise so the PLE path trains from the start
        for layer in model.model.layers:
            layer.altup.correct_output_scale.normal_(0.0, 0.02)
    nparam = sum(p.numel() for p in model.parameters())
    print(f"model: {nparam} parameters", flush=True)

    targets = quant_targets(model, cfg)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": other, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    total = args.steps + args.qat_steps
    warm = 100

    def lr_at(step: int) -> float:
        if step < warm:
            return args.lr * (step + 1) / warm
        frac = min(1.0, (step - warm) / max(1, total - warm))
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * frac)))

    log = []
    model.train()
    step, float_steps = 0, args.steps
    t_train = time.time()
    while step < float_steps + args.qat_steps:
        qat = step >= float_steps
        if not qat and (time.time() - t_train) / 60 > args.max_minutes:
            print(f"time bound hit at step {step}; switching to QAT", flush=True)
            float_steps = step
            continue
        for g in opt.param_groups:
            g["lr"] = lr_at(step + (args.steps - float_steps) if qat else step)
        ids = batches(train_stream, args.seq, args.batch, rng)
        masters = []
        if qat:  # straight-through: forward/backward on INT4 values, update the float masters
            with torch.no_grad():
                for p, group in targets:
                    masters.append(p.detach().clone())
                    p.copy_(int4_fake(p, group))
        logits = model(input_ids=ids[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if qat:
            with torch.no_grad():
                for (p, _), m in zip(targets, masters, strict=True):
                    p.copy_(m)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 25 == 0 or step == 1:
            el = time.time() - t_train
            lr = opt.param_groups[0]["lr"]
            tag = "qat " if qat else ""
            print(f"step {step} {tag}loss {loss.item():.4f} lr {lr:.2e} {el:.0f}s", flush=True)
            log.append({"step": step, "loss": round(loss.item(), 4), "qat": qat, "seconds": round(el, 1)})
        if step % 500 == 0:
            print(f"  held-out nll {evaluate(model, held_stream, args.seq, 8):.4f}", flush=True)

    train_s = time.time() - t_train
    nll = evaluate(model, held_stream, args.seq, args.eval_windows)
    # the same evaluation with INT4 weights, for the record
    with torch.no_grad():
        masters = [p.detach().clone() for p, _ in targets]
        for p, group in targets:
            p.copy_(int4_fake(p, group))
    nll_q = evaluate(model, held_stream, args.seq, args.eval_windows)
    with torch.no_grad():
        for (p, _), m in zip(targets, masters, strict=True):
            p.copy_(m)
    print(f"held-out nll {nll:.4f} ppl {math.exp(nll):.3f}; int4-weight ppl {math.exp(nll_q):.3f}",
          flush=True)

    state = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()
             if k != "lm_head.weight"}  # tied to model.embed_tokens.weight
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    snapped = snap_to_int4_grid(out / "model.safetensors", cfg)
    (out / "config.json").write_text(json.dumps({**cfg, "torch_dtype": "float16"}, indent=2) + "\n")
    meta = {
        "python": sys.version.split()[0],
        "train_files": len(train_files), "heldout_files": len(held_files),
        "train_tokens": len(train_stream), "heldout_tokens": len(held_stream),
        "heldout_bytes_per_token": round(nbytes_held / len(held_stream), 3),
        "parameters": nparam, "float_steps": float_steps, "qat_steps": args.qat_steps,
        "batch": args.batch, "seq": args.seq, "lr": args.lr, "seed": args.seed, "threads": args.threads,
        "train_seconds": round(train_s, 1), "snapped_int4_tensors": snapped,
        "eval": {"note": "torch, float32 master weights before snapping; int4 = snapped weights",
                 "windows": args.eval_windows, "seq": args.seq, "nll": round(nll, 5),
                 "ppl": round(math.exp(nll), 4), "ppl_int4_weights_torch": round(math.exp(nll_q), 4)},
        "log": log,
    }
    (out / "metrics.json").write_text(json.dumps({"training": meta}, indent=2) + "\n")
    print(json.dumps({k: v for k, v in meta.items() if k != "log"}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
