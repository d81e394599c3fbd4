"""Acceptance run: the ``gemma3n-e4b`` shape preset decodes one token on the W4A8 ``quant`` target.

Synthetic weights (deterministic, generated per tensor on demand) are quantized to INT4 one tensor
at a time — the token-embedding and per-layer-embedding tables in row chunks — so no float copy of
the model ever exists. Then one token is decoded through the same backend ``npukit generate
gemma3n-e4b --target quant`` uses. Prints one JSON object: timings, INT4 store size, peak RSS.

    .venv/bin/python scripts/e4b_quant_decode.py [--kv int4] [--preset gemma3n-e4b]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="gemma3n-e4b")
    ap.add_argument("--kv", default="int4", choices=("fp16", "int8", "int4"))
    ap.add_argument("--token", type=int, default=2, help="token to decode (default: BOS)")
    args = ap.parse_args(argv)

    from npukit.models.loading import load_model
    from npukit.runtime import backends

    t0 = time.perf_counter()
    model = load_model(args.preset)
    t1 = time.perf_counter()
    backend = backends.create_backend(model, "quant", kv=args.kv)
    t2 = time.perf_counter()
    rss_after_load = peak_rss_bytes()
    logits = backend.step(args.token)
    t3 = time.perf_counter()
    out = {
        "preset": args.preset, "kv": args.kv, "token": args.token,
        "open_seconds": round(t1 - t0, 2),
        "quantize_seconds": round(t2 - t1, 1),
        "decode_seconds": round(t3 - t2, 1),
        "int4_store_bytes": backend.store.nbytes,
        "peak_rss_bytes_after_quantize": rss_after_load,
        "peak_rss_bytes": peak_rss_bytes(),
        "logits_shape": list(logits.shape),
        "logits_finite": bool(np.all(np.isfinite(logits))),
        "argmax": int(np.argmax(logits)),
        "stats": backend.stats(),
    }
    print(json.dumps(out, indent=2))
    return 0 if out["logits_finite"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
