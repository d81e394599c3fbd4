"""Marginal seconds per decoded token: bit-exact pccx (FastSimulator) vs transformers fp32 eager, same run.

Shapes: an E2B-width Gemma 3n text decoder (hidden 2048, FFN 8192, 8 heads × 256, 2 KV heads, AltUp 4,
LAuReL 64, per-layer inputs 256) with ``--layers`` layers and a ``--vocab`` vocabulary (default 32 768,
reduced from 262 400 so the run stays short; ``--vocab 262400`` gives the real one).

(a) transformers ``Gemma3nForCausalLM`` fp32, eager attention, ``torch.set_num_threads(--threads)``,
    random weights, KV-cached decode one token at a time.
(b) npukit pccx on `npukit.targets.pccx.fastsim.FastSimulator`. Until the Gemma 3n → pccx compiler
    lands this is a **hand-assembled GEMV-dominated program** with the same per-layer INT4 weight
    matrices (the transformers weights quantized to INT4 with FP32 row scales), RMSNorm/softmax/GELU/
    AltUp-shaped CVO sequences, per-head Q/K norms and RoPE multiplies, INT8 attention GEMVs over the
    current context (shape slots updated by the host per token, K/V rows appended by MEMCPY; the
    attention operands are timing stand-ins, not a real KV cache) and the LM head tiled into
    8 192-row GEMVs. It is not the model's arithmetic; it is its instruction stream's shape.
(c) the host memory-bandwidth floor: the INT4 weight bytes one token streams (from the Work records)
    divided by the host bandwidth measured in this run (NumPy sum over a 512 MiB array).

Marginal s/token = (time for tokens 1..N+1 − time for token 1) / N, median over ``--repeats``.
All timings are tier ``measured`` on this machine; ratios are ``derived``.
Usage: ``python benchmarks/gemma3n_decode.py [--layers 4] [--tokens 8] [--repeats 3] [--json]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from typing import Any

import numpy as np

from npukit.cli import ui
from npukit.evidence import Ledger, Tier
from npukit.formats.int4 import quantize_int4
from npukit.targets.pccx import kernels
from npukit.targets.pccx.asm import assemble
from npukit.targets.pccx.fastsim import FastSimulator
from npukit.targets.pccx.numerics import to_bits
from npukit.targets.pccx.sim import weight_entry, weight_image

HIDDEN, FFN, HEADS, KV_HEADS, HEAD_DIM, PLE, LAUREL, ALTUP = 2048, 8192, 8, 2, 256, 256, 64, 4
W_BASE = 0x4000_0000
KV_BASE = 0xC000_0000
LM_ROWS = 8192  # LM head GEMV tile (M field is 16 bits; 8192 × 2048 = 2^24 weights per GEMV)
S_ATT, S_ATTV, S_KW, S_VW = 60, 61, 62, 63  # fmap slots the host rewrites per token


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


class Program:
    """A tiny assembler-side allocator: L2 vectors, weight images in host DDR, assembly lines."""

    def __init__(self, sim: FastSimulator) -> None:
        self.sim, self.lines, self.top, self.waddr = sim, [], 0x10, W_BASE
        self.int4_bytes = 0
        self.gamma = self.vec(HIDDEN)
        sim.write_l2_bits(self.gamma, to_bits(np.ones(HIDDEN)))

    def vec(self, n: int) -> int:
        w = self.top
        self.top += -(-n // 8)
        return w

    def put(self, w: np.ndarray) -> tuple[int, int, int]:
        """Quantize a float32 matrix [M, K] to INT4 + row scales and place its image in host DDR."""
        q, s = quantize_int4(np.asarray(w, np.float32), axis=-1)
        img = np.frombuffer(weight_image(q, "int4", s), np.uint8)
        addr = self.waddr
        self.sim.host.write(addr, img)
        self.waddr += -(-img.size // 4096) * 4096
        self.int4_bytes += img.size
        return addr, w.shape[0], w.shape[1]

    def gemv(self, mat: tuple[int, int, int], src: int, dst: int, flags: str = "w_scale") -> None:
        addr, m, k = mat
        f, hi, lo = weight_entry("int4", addr)
        self.lines += [f"memset cache=fmap slot=0 a={m} b=1 c={k}",
                       f"memset cache=weight slot=0 a={f} b={hi} c={lo}",
                       f"gemv dest=0x{dst:X} src=0x{src:X} flags={flags} size=0 shape=0"]

    def cvo(self, fn: str, src: int, dst: int, n: int, flags: str = "0") -> None:
        self.lines.append(f"cvo.{fn} src=0x{src:X} dst=0x{dst:X} len={n} flags={flags}")

    def rms(self, x: int, y: int, n: int, t: int, r: int) -> None:
        """RMSNorm: square, sum (S), ÷n, rsqrt, S ← r, scale, × gamma (8 instructions)."""
        self.cvo("square", x, t, n)
        self.cvo("reduce_sum", t, r, n)
        self.lines.append(f"memset cache=sreg slot=0 a=0x{int(to_bits(float(n))):X}")
        self.cvo("scale", r, r, 1, "recip_scale")
        self.cvo("rsqrt", r, r, 1)
        self.cvo("reduce_sum", r, r + 1, 1)
        self.cvo("scale", x, y, n)
        self.cvo("mul", self.gamma, y, n)


def build(sim: FastSimulator, model: Any, cap: int) -> tuple[Program, dict[str, int]]:
    """The per-token program (see the module docstring) and the L2 addresses the host touches."""
    P = Program(sim)
    g = {k: P.vec(n) for k, n in [("x", HIDDEN), ("y", HIDDEN), ("t", FFN), ("h", HIDDEN), ("a", HIDDEN),
                                   ("q", HEADS * HEAD_DIM), ("k", KV_HEADS * HEAD_DIM),
                                   ("v", KV_HEADS * HEAD_DIM), ("o", HEADS * HEAD_DIM), ("gate", FFN),
                                   ("up", FFN), ("s", cap), ("p", cap), ("cs", HEAD_DIM), ("sn", HEAD_DIM),
                                   ("sw", HEAD_DIM), ("lr", HIDDEN), ("c", 64), ("pl", PLE)]}
    r = P.vec(16)
    xs = [P.vec(HIDDEN) for _ in range(ALTUP)]
    sim.write_l2_bits(g["s"], np.full(cap, 0xFF80, np.uint16))  # -inf beyond the context: exp -> 0
    sim.write_l2_bits(g["cs"], to_bits(np.cos(np.arange(HEAD_DIM) / 7.0)))
    sim.write_l2_bits(g["sn"], to_bits(np.sin(np.arange(HEAD_DIM) / 7.0)))
    half = HEAD_DIM // 2 // 8
    sim.set_cc(0, 59, half)
    m = model.model
    for i, layer in enumerate(m.layers):
        W = {n: P.put(p.detach().numpy()) for n, p in layer.named_parameters() if p.ndim == 2}
        rt, x, y, t = g["c"], xs[0], g["y"], g["t"]
        # AltUp predict: router (RMS, GEMV, tanh), coefficients, 4 × (4 scale-accumulate + add)
        P.rms(x, y, HIDDEN, t, r)
        P.gemv(W["altup.modality_router.weight"], y, rt)
        P.cvo("tanh", rt, rt, ALTUP)
        P.gemv(W["altup.prediction_coefs.weight"], rt, rt + 1)
        for j in range(ALTUP):
            for k in range(ALTUP):
                P.cvo("reduce_sum", rt + 1, r + 2, 1)
                P.cvo("scale", xs[k], g["a"], HIDDEN, "accm" if k else "0")
            P.cvo("add", xs[j], g["a"], HIDDEN)
        P.rms(g["a"], x, HIDDEN, t, r)
        # LAuReL
        P.gemv(W["laurel.linear_left.weight"], x, g["pl"])
        P.gemv(W["laurel.linear_right.weight"], g["pl"], g["lr"])
        P.rms(g["lr"], g["lr"], HIDDEN, t, r)
        # attention: Q/K/V, per-head norm + RoPE, K/V append, per-head softmax(QKᵀ)V, O
        P.gemv(W["self_attn.q_proj.weight"], x, g["q"])
        P.gemv(W["self_attn.k_proj.weight"], x, g["k"])
        P.gemv(W["self_attn.v_proj.weight"], x, g["v"])
        for base, nh, rope in ((g["q"], HEADS, True), (g["k"], KV_HEADS, True), (g["v"], KV_HEADS, False)):
            for h in range(nh):
                hv = base + h * HEAD_DIM // 8
                P.rms(hv, hv, HEAD_DIM, t, r)
                if rope:
                    P.lines += [f"memcpy from=npu to=npu dest=0x{g['sw']:X} src=0x{hv + half:X} shape=59",
                                f"memcpy from=npu to=npu dest=0x{g['sw'] + half:X} src=0x{hv:X} shape=59"]
                    P.cvo("mul", g["cs"], hv, HEAD_DIM)
                    P.cvo("mul", g["sn"], g["sw"], HEAD_DIM)
                    P.cvo("add", g["sw"], hv, HEAD_DIM)
        kv = KV_BASE + i * 4 * cap * HEAD_DIM
        for h in range(KV_HEADS):
            for j, src in enumerate((g["k"], g["v"])):
                slot = S_KW if j == 0 else S_VW
                off = (kv - KV_BASE + (2 * h + j) * cap * HEAD_DIM) // 16
                P.lines.append(f"memcpy from=npu to=host src=0x{src + h * HEAD_DIM // 8:X} "
                               f"aux=0x{off:X} shape={slot}")
        for h in range(HEADS):
            kh = kv + (2 * (h // (HEADS // KV_HEADS))) * cap * HEAD_DIM
            kf, khi, klo = weight_entry("int8", kh)
            vf, vhi, vlo = weight_entry("int8", kh + cap * HEAD_DIM)
            qh, oh = g["q"] + h * HEAD_DIM // 8, g["o"] + h * HEAD_DIM // 8
            P.lines += [f"memset cache=weight slot=1 a={kf} b={khi} c={klo}",
                        "memset cache=sreg slot=1 a=0xFF80",
                        f"gemv dest=0x{g['s']:X} src=0x{qh:X} flags=findemax size=1 shape={S_ATT}",
                        f"memset cache=weight slot=2 a={vf} b={vhi} c={vlo}"]
            P.cvo("exp", g["s"], g["p"], cap, "sub_emax")  # softmax over the capacity: tail exp(-inf) = 0
            P.cvo("reduce_sum", g["p"], r + 3, cap)
            P.cvo("scale", g["p"], g["p"], cap, "recip_scale")
            P.lines.append(f"gemv dest=0x{oh:X} src=0x{g['p']:X} flags=0 size=2 shape={S_ATTV}")
        P.gemv(W["self_attn.o_proj.weight"], g["o"], g["a"])
        P.rms(g["a"], g["a"], HIDDEN, t, r)
        P.cvo("add", g["lr"], g["a"], HIDDEN)
        P.cvo("add", x, g["a"], HIDDEN)
        # MLP with Gaussian top-k on the gate
        P.rms(g["a"], y, HIDDEN, t, r)
        P.gemv(W["mlp.gate_proj.weight"], y, g["gate"])
        P.cvo("reduce_sum", g["gate"], r + 4, FFN)
        P.cvo("scale", g["gate"], t, FFN, "recip_scale")
        P.cvo("square", t, t, FFN)
        P.cvo("reduce_sum", t, r + 5, FFN)
        P.cvo("sqrt", r + 5, r + 5, 1)
        P.cvo("relu_bias", g["gate"], g["gate"], FFN)
        P.gemv(W["mlp.up_proj.weight"], y, g["up"])
        P.cvo("gelu", g["gate"], g["gate"], FFN)
        P.cvo("mul", g["up"], g["gate"], FFN)
        P.gemv(W["mlp.down_proj.weight"], g["gate"], g["h"])
        P.rms(g["h"], g["h"], HIDDEN, t, r)
        P.cvo("add", g["a"], g["h"], HIDDEN)
        # AltUp correct + per-layer input
        P.rms(g["h"], y, HIDDEN, t, r)
        P.gemv(W["altup.modality_router.weight"], y, rt)
        P.cvo("tanh", rt, rt, ALTUP)
        P.gemv(W["altup.correction_coefs.weight"], rt, rt + 1)
        for j in range(ALTUP):
            P.cvo("reduce_sum", rt + 1, r + 6, 1)
            P.cvo("scale", g["h"], xs[j], HIDDEN, "accm")
        P.gemv(W["per_layer_input_gate.weight"], xs[0], g["pl"])
        P.cvo("gelu", g["pl"], g["pl"], PLE)
        P.gemv(W["per_layer_projection.weight"], g["pl"], y)
        P.rms(y, y, HIDDEN, t, r)
        for j in range(1, ALTUP):
            P.cvo("add", y, xs[j], HIDDEN)
        for j in range(ALTUP):  # keep the streams normalised (stand-in for the magnitude matching)
            P.rms(xs[j], xs[j], HIDDEN, t, r)
    # unembed: 3 projections + magnitude match, final norm, tiled LM head with softcap
    for k, p in enumerate(m.altup_unembed_projections):
        P.gemv(P.put(p.weight.detach().numpy()), xs[k + 1], g["a"])
        P.rms(g["a"], g["a"], HIDDEN, t, r)
        P.cvo("add", g["a"], xs[0], HIDDEN)
    P.rms(xs[0], y, HIDDEN, t, r)
    emb = m.embed_tokens.weight.detach().numpy()
    logits = P.vec(emb.shape[0])
    for lo in range(0, emb.shape[0], LM_ROWS):
        P.gemv(P.put(emb[lo:lo + LM_ROWS]), y, logits + lo // 8)
    for lo in range(0, emb.shape[0], 65528):
        n = min(65528, emb.shape[0] - lo)
        P.lines.append("memset cache=sreg slot=0 a=0x41F0")  # 30.0
        P.cvo("scale", logits + lo // 8, logits + lo // 8, n, "recip_scale")
        P.cvo("tanh", logits + lo // 8, logits + lo // 8, n)
        P.cvo("scale", logits + lo // 8, logits + lo // 8, n)
    sim.host.map(KV_BASE, len(m.layers) * 4 * cap * HEAD_DIM)
    return P, {"x": xs, "logits": logits, "vocab": emb.shape[0]}


def pccx_tokens(sim: FastSimulator, P: Program, info: dict, words: list[int], n_tok: int, cap: int,
                rng: np.random.Generator) -> tuple[list[float], int]:
    """Decode n_tok tokens from position 0; seconds per token and INT4 weight bytes per token.

    Per token the host does what a driver does: write the embedded token into the AltUp streams and
    update the descriptors that depend on the position (context length, K/V row address); the program
    words stay the same, so the executor replays its plan. Softmax CVOs run over the context capacity."""
    per: list[float] = []
    wbytes = 0
    for pos in range(n_tok):
        n = pos + 1
        t0 = time.perf_counter()
        # host: embedding row into the AltUp streams, per-token descriptors (context length, KV row)
        for x in info["x"]:
            sim.write_l2_bits(x, to_bits(rng.standard_normal(HIDDEN) * 0.05))
        sim.set_cc(0, S_ATT, n, 1, HEAD_DIM)
        sim.set_cc(0, S_ATTV, HEAD_DIM, 1, n)
        for slot, row in ((S_KW, pos), (S_VW, pos)):
            unit = (KV_BASE + row * HEAD_DIM) // 16
            sim.set_cc(0, slot, HEAD_DIM // 16, unit >> 16, unit & 0xFFFF)
        sim.load_program(words)
        works = sim.run()
        if sim.error is not None:
            raise SystemExit(f"pccx program faulted: {sim.error}")
        per.append(time.perf_counter() - t0)
        wbytes = sum(w.weight_bytes for w in works if "int4" in w.label)
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--tokens", type=int, default=8, help="N: marginal = (T(N+1) - T(1)) / N")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--backend", choices=kernels.BACKENDS, default=kernels.BACKENDS[0])
    ap.add_argument("--weights", choices=["int8", "packed"], default="int8")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    if kernels.HAVE_NUMBA:
        import numba

        numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    t_build = time.perf_counter()
    model = hf_model(args.layers, args.vocab)
    cap = max(64, args.tokens + 2)
    sim = FastSimulator(backend=args.backend, weights=args.weights)
    P, info = build(sim, model, cap)
    words = assemble("\n".join(P.lines))
    t_build = time.perf_counter() - t_build
    rng = np.random.default_rng(0)
    n_tok = args.tokens + 1
    hf_m, px_m, first = [], [], []
    wbytes = 0
    for _ in range(args.repeats):  # interleaved, so both sides see the same machine load
        hf_m.append(marginal(hf_tokens(model, n_tok)))
        per, wbytes = pccx_tokens(sim, P, info, words, n_tok, cap, rng)
        first.append(per[0])
        px_m.append(marginal(per))
    bw = host_bandwidth()
    hf_s, px_s = statistics.median(hf_m), statistics.median(px_m)
    floor = wbytes / bw
    machine = (f"{platform.machine()} {os.cpu_count()} cpu, {platform.processor() or 'cpu'}; torch "
               f"{torch.__version__} threads {args.threads}; fastsim {args.backend}/{args.weights}")
    src = (f"benchmarks/gemma3n_decode.py layers={args.layers} vocab={args.vocab} N={args.tokens} "
           f"median of {args.repeats}; {machine}")
    led = Ledger()
    led.add("transformers fp32 eager s/token", hf_s, "s", Tier.MEASURED, src)
    led.add("pccx fastsim s/token", px_s, "s", Tier.MEASURED, src + " (hand-assembled program)")
    led.add("host bandwidth", bw / 1e9, "GB/s", Tier.MEASURED, src + " numpy sum 512 MiB, best of 5")
    led.add("INT4 bytes/token", float(wbytes), "B", Tier.MEASURED, src + " Σ Work.weight_bytes (INT4)")
    led.add("bandwidth floor s/token", floor, "s", Tier.DERIVED, src)
    led.add("speedup vs transformers", hf_s / px_s, "x", Tier.DERIVED, src)
    led.add("pccx / floor", px_s / floor, "x", Tier.DERIVED, src)
    led.add("pccx first token s", statistics.median(first), "s", Tier.MEASURED, src)
    if args.json:
        ui.emit_json({"ledger": led, "instructions": len(words), "fallbacks": sim.fallbacks,
                      "build_s": t_build})
        return 0
    ui.table([["transformers fp32 eager", f"{hf_s * 1e3:.1f}", f"{hf_s / px_s:.2f}x", "measured"],
              ["pccx bit-exact (fastsim)", f"{px_s * 1e3:.1f}", "1.00x", "measured"],
              ["INT4 bandwidth floor", f"{floor * 1e3:.1f}", f"{floor / px_s:.2f}x", "derived"]],
             ["path", "ms/token (marginal)", "time / pccx", "tier"], align="lrrl")
    print(f"\nspeedup pccx vs transformers: {hf_s / px_s:.2f}x (goal >= 3x); pccx / floor: "
          f"{px_s / floor:.2f}x; host bandwidth {bw / 1e9:.1f} GB/s; INT4 bytes/token {wbytes / 1e6:.1f} MB;"
          f" {len(words)} instructions/token, {sim.fallbacks} reference fallbacks in all runs")
    print(f"tier: measured (ratios and floor derived); source: {src}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
