"""Measure the embedded model: held-out perplexity under float, W4A8 (fp16 / int8 / int4 KV), torch.

Windows: the first ``--windows`` non-overlapping 128-token windows of the shipped held-out text
(``heldout.txt``: standard-library files never trained on), each from an empty KV cache, every
position scored (teacher forcing). Also counts, per W4A8 variant, the positions whose greedy
(argmax) token equals the float reference's. Writes the numbers into the model's ``metrics.json``
under ``"eval"`` and prints a Markdown table for docs/models.md.

    .venv/bin/python scripts/eval_embedded.py [--windows 16] [--write-heldout]

``--write-heldout`` (re)creates ``heldout.txt`` from this Python's standard library using the
training script's file split; ``--torch`` adds transformers' own perplexity of the same windows
(needs the hf extra) as an independent check of the float reference.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np


def write_heldout(model_dir: Path, min_tokens: int) -> int:
    sys.path.insert(0, str(Path(__file__).parent))
    from npukit.models.embedded import load_tokenizer
    from train_embedded import read, stdlib_files

    tok = load_tokenizer(model_dir)
    parts, n = [], 0
    for p in stdlib_files()[1]:
        text = read(p)
        parts.append(text)
        n += len(tok.encode(text).ids) + 2
        if n >= min_tokens:
            break
    (model_dir / "heldout.txt").write_text("\x00".join(parts), encoding="utf-8")
    return n


def torch_window_nll(model_dir: Path, windows: np.ndarray) -> list[float]:
    import torch
    from transformers import Gemma3nForCausalLM

    torch.set_num_threads(1)
    model = Gemma3nForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for w in windows:
            ids = torch.from_numpy(w)[None]
            logits = model(input_ids=ids[:, :-1]).logits[0].double()
            nll = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="mean")
            out.append(float(nll))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--write-heldout", action="store_true")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--kv", default="fp16,int8,int4")
    args = ap.parse_args(argv)

    from npukit.models import embedded
    from npukit.models.gemma3n import Gemma3nReference
    from npukit.models.loading import load_model
    from npukit.targets.pccx.gemma3n_quant import Gemma3nW4A8, Int4Store

    model_dir = Path(args.model_dir) if args.model_dir else embedded.default_model_dir()
    if args.write_heldout:
        print(f"heldout.txt: {write_heldout(model_dir, 32 * 128 + 1)} tokens", flush=True)
    windows = embedded.heldout_ids(args.windows, model_dir=model_dir)
    model = load_model(model_dir)
    res: dict[str, dict] = {}

    ref = Gemma3nReference(model.weights)

    def float_logits(ids):
        ref.reset()
        return ref.forward(ids, all_logits=True)

    t0 = time.perf_counter()
    ppl, greedy_f = embedded.perplexity(float_logits, windows)
    per_window = [float(embedded.window_nll(float_logits, w).mean()) for w in windows[:4]]
    res["float"] = {"ppl": round(ppl, 4), "seconds": round(time.perf_counter() - t0, 1),
                    "nll_first4_windows": [round(x, 6) for x in per_window]}
    print(f"float  ppl {ppl:.4f}", flush=True)
    if args.torch:
        nll_t = torch_window_nll(model_dir, windows)
        res["torch"] = {"ppl": round(math.exp(float(np.mean(nll_t))), 4),
                        "nll_first4_windows": [round(x, 6) for x in nll_t[:4]]}
        print(f"torch  ppl {res['torch']['ppl']:.4f}", flush=True)

    store = Int4Store(model.weights)
    for kv in args.kv.split(","):
        q = Gemma3nW4A8(store, kv=kv)

        def quant_logits(ids, q=q):
            q.reset()
            return q.forward(ids, all_logits=True)

        t0 = time.perf_counter()
        ppl_q, greedy_q = embedded.perplexity(quant_logits, windows)
        dt = time.perf_counter() - t0
        agree = float(np.mean(greedy_q == greedy_f))
        res[f"w4a8_{kv}"] = {"ppl": round(ppl_q, 4), "ratio_to_float": round(ppl_q / ppl, 4),
                             "greedy_agreement": round(agree, 4), "seconds": round(dt, 1),
                             "ms_per_token": round(1000 * dt / windows[:, 1:].size, 1)}
        print(f"w4a8 {kv} ppl {ppl_q:.4f} (x{ppl_q / ppl:.4f}), greedy agreement {agree:.4f}, "
              f"{dt:.0f}s", flush=True)

    path = model_dir / "metrics.json"
    metrics = json.loads(path.read_text()) if path.is_file() else {}
    metrics["eval"] = {"windows": args.windows, "seq": 128, "positions": int(windows[:, 1:].size),
                       "int4_store_bytes": store.nbytes, **res}
    path.write_text(json.dumps(metrics, indent=2) + "\n")
    print("\n| variant | held-out perplexity | vs float | greedy = float |")
    print("|---|---|---|---|")
    print(f"| float32 reference | {res['float']['ppl']:.3f} | 1.000 | — |")
    for kv in args.kv.split(","):
        r = res[f"w4a8_{kv}"]
        agree = 100 * r["greedy_agreement"]
        print(f"| W4A8, {kv} KV | {r['ppl']:.3f} | {r['ratio_to_float']:.3f} | {agree:.1f} % |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
