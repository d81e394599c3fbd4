"""Compile full-size Gemma 3n E4B (synthetic weights) onto pccx and run decode tokens on the simulator.

Usage: ``python scripts/pccx_e4b_decode.py [--preset gemma3n-e4b] [--tokens 2] [--kv fp16]
[--prefill N] [--executor reference|fast] [--json OUT]``

``--prefill N`` first runs an N-token prompt through `PccxDriver.prefill` (GEMM chunks) and reports
the chunk's instruction counts, simulated cycles and wall time; the decode tokens follow it.

Prints (and with --json writes) the wall time of each phase, peak RSS, the compile report
(instruction counts per type, extensions and why, L2 peak, constant-cache use, host DDR image)
and the simulated cycles per token with the projected tok/s (derived: pccx-v002-kv260 preset +
timing model). With --check the quantized reference runs the same tokens and the logits are
compared bit for bit (doubles the time).
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from npukit.hw import load_hw
from npukit.models.loading import load_model
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.gemma3n_quant import Gemma3nW4A8, Int4Store


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gemma3n-e4b")
    ap.add_argument("--tokens", type=int, default=2)
    ap.add_argument("--kv", default="fp16")
    ap.add_argument("--kv-max-tokens", type=int, default=8192)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--prefill", type=int, default=0, help="prompt tokens run as GEMM chunks first")
    ap.add_argument("--executor", default="reference", choices=("reference", "fast"))
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    out: dict = {"preset": a.preset, "kv": a.kv}
    t = time.perf_counter()
    model = load_model(a.preset)
    store = Int4Store(model.weights)
    out["quantize_s"] = time.perf_counter() - t
    out["rss_after_quantize_mib"] = rss_mib()
    hw = load_hw("pccx-v002-kv260")
    t = time.perf_counter()
    drv = PccxDriver(hw, executor=a.executor).open().load(store).kv_init(a.kv, a.kv_max_tokens).start()
    out["load_s"] = time.perf_counter() - t
    ref = Gemma3nW4A8(store, kv=a.kv) if a.check else None
    if a.prefill:
        ids = [int(i) for i in np.random.default_rng(0).integers(3, store.config.vocab_size, a.prefill)]
        t = time.perf_counter()
        logits = drv.prefill(ids)
        recs = drv.records[:]
        row = {"prefill_tokens": a.prefill, "wall_s": time.perf_counter() - t,
               "chunks": [{"tokens": getattr(r, "tokens", None), "instructions": r.instructions,
                           "cycles": r.cycles, "compile_s": r.compile_s, "run_s": r.run_s} for r in recs],
               "cycles_per_token": sum(r.cycles or 0 for r in recs) / a.prefill,
               "compile": drv.compile_report().get("prefill_chunk"), "rss_mib": rss_mib()}
        if ref is not None:
            for i in ids:
                want = ref.step(i)
            row["bit_exact"] = bool(np.array_equal(want.view(np.uint32), logits.view(np.uint32)))
        out["prefill"] = row
        print(json.dumps(row, default=str), flush=True)
    toks = [2, 100, 200, 300][: a.tokens]
    out["tokens"] = []
    for tok in toks:
        t = time.perf_counter()
        logits = drv.step(tok)
        r = drv.records[-1]
        row = {"token": tok, "step_s": time.perf_counter() - t, "compile_s": r.compile_s, "run_s": r.run_s,
               "instructions": r.instructions, "cycles": r.cycles,
               "projected_tok_per_s": hw.clocks.core_hz / r.cycles if r.cycles else None,
               "argmax": int(np.argmax(logits)), "rss_mib": rss_mib()}
        if ref is not None:
            want = ref.step(tok)
            row["bit_exact"] = bool(np.array_equal(want.view(np.uint32), logits.view(np.uint32)))
        out["tokens"].append(row)
        print(json.dumps(row), flush=True)
    out["compile"] = drv.compile_report()
    last = drv.records[-1].timing
    if last is not None:
        out["engines"] = {k: {"busy_frac": v.busy / last.cycles, "stalls": v.stalls}
                          for k, v in last.engines.items()}
    out["peak_rss_mib"] = rss_mib()
    text = json.dumps(out, indent=1, default=str)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
