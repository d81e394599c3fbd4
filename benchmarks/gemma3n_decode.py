"""Marginal seconds per decoded token: the COMPILED Gemma 3n on bit-exact pccx vs transformers fp32 eager.

Two models, the same weights on both sides:

(a) an E2B-width Gemma 3n text decoder (hidden 2048, FFN 8192, 8 heads × 256, 2 KV heads, AltUp 4,
    LAuReL 64, per-layer inputs 256, Gaussian top-k in every layer as E2B's first layers) with
    ``--layers`` layers and a ``--vocab`` vocabulary (default 32 768, reduced from 262 400 so the run
    stays short), random weights from transformers' initialiser;
(b) the embedded default model (``npukit/assets/gemma3n-tiny``, 6 layers, hidden 192, vocab 4 096).

transformers side: ``Gemma3nForCausalLM`` fp32, eager attention, ``torch.set_num_threads(--threads)``,
KV-cached decode one token at a time. pccx side: the weights quantized to INT4 (`Int4Store`),
compiled by `npukit.targets.pccx.compile` and run through the real driver,
``PccxDriver(executor="fast")`` (program compiled once per attention-span bucket, descriptors
patched per token, `FastSimulator` replay, numba threads = torch threads), FP16 KV ring.
``--check`` also runs the quant reference (`--target quant`) on the same tokens and requires
bit-identical logits.

The host memory-bandwidth floor: the INT4 weight bytes one token streams (Σ Work.weight_bytes of the
token's INT4 GEMVs) divided by the host bandwidth measured in this run (NumPy sum over 512 MiB).

Marginal s/token = (time for tokens 1..N+1 − time for token 1) / N, median over ``--repeats``; token
1 includes compiling the program. Prefill (``--prompt P`` tokens, 0 to skip): transformers runs the
prompt in one forward call, pccx through ``PccxDriver.prefill`` (GEMM chunks on the systolic-array
path, each weight tile read once per chunk); seconds per prompt token, the first (compiling) run
excluded. Timings are tier ``measured`` on this machine; ratios ``derived``.
Usage: ``python benchmarks/gemma3n_decode.py [--layers 4] [--tokens 8] [--prompt 32] [--repeats 3]
[--threads 2] [--check] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

import numpy as np

from npukit.cli import ui
from npukit.evidence import Ledger, Tier
from npukit.models.gemma3n import Gemma3nConfig, Gemma3nWeights
from npukit.models.gemma3n.weights import DictSource
from npukit.sim.cpu import INT4_FAMILIES
from npukit.sim.cpu import describe as machine_line
from npukit.targets.pccx.driver import PccxDriver
from npukit.targets.pccx.fast import kernels
from npukit.targets.pccx.gemma3n_quant import Gemma3nW4A8, Int4Store

HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM, PLE, LAUREL, ALTUP = 2048, 8192, 8, 2, 256, 256, 64, 4
KV = "fp16"


def hf_model(layers: int, vocab: int) -> Any:
    import torch
    from transformers import Gemma3nForCausalLM, Gemma3nTextConfig

    cfg = Gemma3nTextConfig(
        vocab_size=vocab, vocab_size_per_layer_input=vocab, hidden_size=HIDDEN,
        hidden_size_per_layer_input=PLE, intermediate_size=[FFN] * layers, num_hidden_layers=layers,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, laurel_rank=LAUREL,
        num_kv_shared_layers=0, altup_num_inputs=ALTUP, sliding_window=512,
        layer_types=["full_attention" if (i + 1) % 5 == 0 else "sliding_attention" for i in range(layers)],
        activation_sparsity_pattern=[0.95] * layers, max_position_embeddings=4096)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    return Gemma3nForCausalLM(cfg).eval()


def hf_embedded() -> tuple[Any, Any]:
    """The embedded model for transformers (fp32) and its npukit weights (same checkpoint)."""
    import torch
    from transformers import Gemma3nForCausalLM

    from npukit.models.embedded import default_model_dir
    from npukit.models.safetensors import open_checkpoint

    d = default_model_dir()
    model = Gemma3nForCausalLM.from_pretrained(str(d), dtype=torch.float32, attn_implementation="eager")
    model.eval()
    cfg = Gemma3nConfig.from_hf(json.loads((d / "config.json").read_text()))
    return model, Gemma3nWeights(cfg, open_checkpoint(d), str(d))


def npukit_weights(model: Any) -> Gemma3nWeights:
    """The transformers model's own tensors as npukit weights (float32, no copy)."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    return Gemma3nWeights(Gemma3nConfig.from_hf(model.config.to_dict()), DictSource(sd), "transformers")


def pccx_tokens(drv: PccxDriver, n_tok: int, ref: Gemma3nW4A8 | None = None) -> tuple[list[float], int]:
    """Decode n_tok tokens from position 0 (greedy); seconds per token and INT4 weight bytes per token."""
    drv.reset()
    if ref is not None:
        ref.reset()
    per: list[float] = []
    tok, wbytes = 2, 0
    for _ in range(n_tok):
        t0 = time.perf_counter()
        logits = drv.step(tok)
        per.append(time.perf_counter() - t0)
        n = drv.records[-1].instructions
        wbytes = sum(w.weight_bytes for _, w in drv.dev.trace[-n:] if " int4" in w.label)
        drv.dev.trace.clear()
        if ref is not None and not np.array_equal(ref.step(tok).view(np.uint32), logits.view(np.uint32)):
            raise SystemExit(f"pccx logits differ from the quant reference at position {drv.position - 1}")
        tok = int(np.argmax(logits))
    return per, wbytes


def hf_tokens(model: Any, n_tok: int) -> list[float]:
    import torch
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    per = []
    tok = torch.tensor([[5]])
    with torch.no_grad():
        for _ in range(n_tok):
            t0 = time.perf_counter()
            out = model(input_ids=tok, past_key_values=cache, use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
            per.append(time.perf_counter() - t0)
    return per


def hf_prefill(model: Any, ids: list[int]) -> float:
    import torch
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        t0 = time.perf_counter()
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
        return (time.perf_counter() - t0) / len(ids)


def pccx_prefill(drv: PccxDriver, ids: list[int], ref: Gemma3nW4A8 | None = None) -> float:
    drv.reset()
    t0 = time.perf_counter()
    logits = drv.prefill(ids)
    dt = (time.perf_counter() - t0) / len(ids)
    drv.dev.trace.clear()
    if ref is not None:
        ref.reset()
        for t in ids:
            want = ref.step(t)
        if not np.array_equal(want.view(np.uint32), logits.view(np.uint32)):
            raise SystemExit("pccx GEMM prefill logits differ from the quant reference run token by token")
    return dt


def host_bandwidth() -> float:
    a = np.ones(1 << 27, np.float32)  # 512 MiB
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        a.sum()
        best = min(best, time.perf_counter() - t0)
    return a.nbytes / best


def marginal(per: list[float]) -> float:
    return (sum(per) - per[0]) / (len(per) - 1)


def run_case(name: str, hf: Any, weights: Gemma3nWeights, args: Any, led: Ledger, src: str) -> dict:
    t0 = time.perf_counter()
    store = Int4Store(weights)
    drv = PccxDriver(executor="fast", timing=False).open().load(store).kv_init(KV)
    drv.start()
    ref = Gemma3nW4A8(store, kv=KV) if args.check else None
    setup = time.perf_counter() - t0
    n_tok = args.tokens + 1
    hf_m, px_m, first = [], [], []
    wbytes = 0
    for r in range(args.repeats):  # interleaved, so both sides see the same machine load
        hf_m.append(marginal(hf_tokens(hf, n_tok)))
        per, wbytes = pccx_tokens(drv, n_tok, ref if r == 0 else None)
        first.append(per[0])
        px_m.append(marginal(per))
    hf_s, px_s = statistics.median(hf_m), statistics.median(px_m)
    st = drv.last_stats
    pre: dict[str, float] = {}
    if args.prompt:
        ids = [int(i) for i in np.random.default_rng(1).integers(3, weights.config.vocab_size, args.prompt)]
        pccx_prefill(drv, ids, ref)  # compiles the chunk programs (and checks the bits with --check)
        hf_prefill(hf, ids)
        pre = {"hf": statistics.median(hf_prefill(hf, ids) for _ in range(args.repeats)),
               "pccx": statistics.median(pccx_prefill(drv, ids) for _ in range(args.repeats))}
    p = f"{name}: "
    led.add(p + "transformers fp32 eager s/token", hf_s, "s", Tier.MEASURED, src)
    led.add(p + "pccx s/token", px_s, "s", Tier.MEASURED, src + " (compiled model, PccxDriver fast)")
    led.add(p + "INT4 bytes/token", float(wbytes), "B", Tier.MEASURED, src + " Σ Work.weight_bytes (INT4)")
    led.add(p + "speedup vs transformers", hf_s / px_s, "x", Tier.DERIVED, src)
    led.add(p + "pccx first token s", statistics.median(first), "s", Tier.MEASURED,
            src + " (includes compile)")
    if pre:
        ps = f"{src}; prompt {args.prompt} tokens"
        led.add(p + "transformers fp32 prefill s/prompt token", pre["hf"], "s", Tier.MEASURED, ps)
        led.add(p + "pccx GEMM prefill s/prompt token", pre["pccx"], "s", Tier.MEASURED,
                ps + " (PccxDriver.prefill)")
        led.add(p + "prefill speedup vs transformers", pre["hf"] / pre["pccx"], "x", Tier.DERIVED, ps)
    return {"name": name, "hf": hf_s, "pccx": px_s, "wbytes": wbytes, "first": statistics.median(first),
            "instructions": sum(st.counts.values()), "fallbacks": drv.dev.fallbacks, "setup_s": setup,
            "variants": len(drv.variants), "checked": bool(args.check), "prefill": pre}


def main(argv: list[str] | None = None) -> int:
    # the CPU and kernel paths measured (both INT4 families: VNNI and AVX2)
    print(machine_line(*INT4_FAMILIES), file=sys.stderr)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--tokens", type=int, default=8, help="N: marginal = (T(N+1) - T(1)) / N")
    ap.add_argument("--prompt", type=int, default=32, help="prefill prompt tokens (0: no prefill timing)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--check", action="store_true", help="require bit-identical logits vs --target quant")
    ap.add_argument("--skip-embedded", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    if kernels.HAVE_NUMBA:
        import numba

        numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    simd = ""
    if kernels.HAVE_NUMBA:
        from npukit.sim.nb_simd import probe

        simd = f" ({probe()[0]})"
    machine = (f"{platform.machine()} {os.cpu_count()} cpu, {platform.processor() or 'cpu'}; torch "
               f"{torch.__version__} threads {args.threads}; fastsim {kernels.BACKENDS[0]}{simd}; KV {KV}")
    base = f"benchmarks/gemma3n_decode.py N={args.tokens} median of {args.repeats}; {machine}"
    led = Ledger()
    hf = hf_model(args.layers, args.vocab)
    cases = [run_case("e2b-width", hf, npukit_weights(hf), args, led,
                      f"{base}; E2B width, layers={args.layers} vocab={args.vocab}")]
    if not args.skip_embedded:
        hf_e, w_e = hf_embedded()
        cases.append(run_case("embedded", hf_e, w_e, args, led, f"{base}; embedded gemma3n-tiny"))
    bw = host_bandwidth()
    led.add("host bandwidth", bw / 1e9, "GB/s", Tier.MEASURED, base + " numpy sum 512 MiB, best of 5")
    for c in cases:
        floor = c["wbytes"] / bw
        led.add(f"{c['name']}: bandwidth floor s/token", floor, "s", Tier.DERIVED, base)
        led.add(f"{c['name']}: pccx / floor", c["pccx"] / floor, "x", Tier.DERIVED, base)
        c["floor"] = floor
    if args.json:
        ui.emit_json({"ledger": led, "cases": cases})
        return 0
    rows = []
    for c in cases:
        rows.append([c["name"], f"{c['hf'] * 1e3:.1f}", f"{c['pccx'] * 1e3:.2f}",
                     f"{c['hf'] / c['pccx']:.2f}x", f"{c['floor'] * 1e3:.2f}",
                     f"{c['pccx'] / c['floor']:.1f}x", str(c["instructions"]),
                     str(c["fallbacks"])])
    ui.table(rows, ["model", "transformers ms/tok", "pccx ms/tok", "speedup", "INT4 floor ms", "pccx/floor",
                    "instr/tok", "fallbacks"], align="lrrrrrrr")
    if args.prompt:
        print(f"\nprefill, {args.prompt}-token prompt (ms per prompt token):")
        ui.table([[c["name"], f"{c['prefill']['hf'] * 1e3:.2f}", f"{c['prefill']['pccx'] * 1e3:.2f}",
                   f"{c['prefill']['hf'] / c['prefill']['pccx']:.2f}x"] for c in cases],
                 ["model", "transformers", "pccx GEMM prefill", "speedup"], align="lrrr")
    print(f"\nhost bandwidth {bw / 1e9:.1f} GB/s; goal: e2b-width speedup >= 3x; "
          f"bit-exact check vs quant: {'on' if args.check else 'off (--check)'}")
    print(f"tier: measured (speedups, floors derived); source: {base}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
