"""Analytic roofline of one decode token: per op MACs, SFU elements, bytes per memory level, time,
bound and energy; vectorized over design points so a sweep is a few array operations.

Model (stated, so every figure built on it can cite it):

* an op's time is ``max(MAC time, each memory level's bytes / bandwidth)`` — DMA and compute
  overlap perfectly *within* an op (weight prefetch; pccx overlap rule 1);
* ops on the MAC/memory path run one after another; SFU work runs on its own engine in parallel
  when the machine says so (pccx rule 2, GEMV→SFU FIFO), so token time =
  ``max(Σ op time, Σ SFU time)``; otherwise SFU time adds per op;
* weights and the KV cache stream from the levels that carry them at every token (batch 1: no
  reuse); activations move as BF16 through the on-chip level;
* sparsity skips the rows/columns of FFN up/down projections whose activation is zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from npukit.errors import ConfigError
from npukit.perf.machine import TRAFFIC, Machine
from npukit.perf.ops import ACT_BYTES, OpTable


@dataclass(frozen=True)
class Fmt:
    bits: float  # storage bits per element
    scale_bytes: float  # per weight row (weights) or per (token, head) (KV)
    mac: str  # operand type for MAC rate and energy
    source: str


WEIGHT_FORMATS = {
    "int4": Fmt(4, 4, "int4", "docs/numerics.md: INT4, two per byte, FP32 scale per row"),
    "int8": Fmt(8, 4, "int8", "docs/numerics.md: INT8 + FP32 row scale"),
    "fp16": Fmt(16, 0, "fp16", "IEEE half, no scale"),
    "bf16": Fmt(16, 0, "fp16", "bfloat16, no scale"),
    "ternary": Fmt(1.6, 0, "ternary", "refs/ternary.md §1.2: 5 trits per byte, per-tensor scale"),
    "ternary-i2s": Fmt(2, 0, "ternary", "refs/ternary.md §3.1: bitnet.cpp I2_S, 2 bits per weight"),
    # FP8 as storage (kernels/fp8, docs/kernels/fp8.md): 1-byte codes + an fp16 scale per output
    # column, re-quantized to int8 for the MAC; the decode itself is not in the roofline
    "fp8-e4m3": Fmt(8, 2, "int8", "docs/kernels/fp8.md: FP8 E4M3 (IEEE-style) bytes + fp16 column scale"),
    "fp8-e4m3fn": Fmt(8, 2, "int8", "docs/kernels/fp8.md: OCP E4M3FN bytes + fp16 column scale"),
    "fp8-e5m2": Fmt(8, 2, "int8", "docs/kernels/fp8.md: FP8 E5M2 bytes + fp16 column scale"),
}
KV_FORMATS = {
    "fp16": Fmt(16, 0, "fp16", "FP16 KV cache"),
    "int8": Fmt(8, 4, "int8", "docs/numerics.md: INT8 KV, FP32 scale per token and head"),
    "int4": Fmt(4, 4, "int4", "docs/numerics.md: INT4 KV, FP32 scale per token and head"),
}


def weight_format(name: str) -> Fmt:
    try:
        return WEIGHT_FORMATS[name]
    except KeyError:
        raise ConfigError(f"unknown weight format {name!r}; known: {', '.join(WEIGHT_FORMATS)}") from None


def kv_format(name: str) -> Fmt:
    try:
        return KV_FORMATS[name]
    except KeyError:
        raise ConfigError(f"unknown KV format {name!r}; known: {', '.join(KV_FORMATS)}") from None


@dataclass
class Points:
    """P design points on one machine layout (same level names); every field has shape (P,)."""

    context: np.ndarray
    w_bits: np.ndarray
    w_scale: np.ndarray
    kv_bits: np.ndarray
    kv_scale: np.ndarray
    sparsity: np.ndarray  # uniform FFN activation sparsity (fraction skipped)
    model_sparsity: np.ndarray  # bool: also apply the model's own pattern (Gemma 3n top-k)
    rate_w: np.ndarray  # MAC/s for weight ops
    rate_kv: np.ndarray  # MAC/s for attention ops
    sfu_rate: np.ndarray
    bw: np.ndarray  # (P, levels) bytes/s
    carries: np.ndarray  # (levels, 3) bool, TRAFFIC order
    level_pj: np.ndarray  # (P, levels)
    e_mac_w: np.ndarray
    e_mac_kv: np.ndarray
    e_sfu: np.ndarray
    static_w: np.ndarray
    sfu_overlap: np.ndarray  # bool
    level_names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.context)


def points_for(machine: Machine, *, weights: str | list[str], kv: str | list[str],
               context: float | list[float], sparsity: float | list[float] = 0.0,
               model_sparsity: bool | list[bool] = False, basis: str = "peak",
               machines: list[Machine] | None = None) -> Points:
    """Broadcast scalar-or-list arguments into P points. ``machines`` (one per point) overrides
    ``machine`` for sweeps over hardware parameters; all must share level names."""
    arrs = [np.atleast_1d(np.asarray(x, dtype=object))
            for x in (weights, kv, context, sparsity, model_sparsity)]
    p = max(len(a) for a in arrs)
    if machines is not None:
        p = max(p, len(machines))
    for a in arrs:
        if len(a) not in (1, p):
            raise ConfigError("point arguments must be scalars or lists of one common length")
    ws, ks, cs, ss, ms = (np.broadcast_to(a, (p,)) for a in arrs)
    ms_list = machines if machines is not None else [machine] * p
    if len(ms_list) == 1:
        ms_list = ms_list * p
    if basis not in ("peak", "effective"):
        raise ConfigError(f"bandwidth basis must be peak or effective, got {basis!r}")
    names = tuple(lv.name for lv in ms_list[0].levels)
    if any(tuple(lv.name for lv in m.levels) != names for m in ms_list):
        raise ConfigError("all machines of a sweep must have the same memory levels")
    wf = [weight_format(str(w)) for w in ws]
    kf = [kv_format(str(k)) for k in ks]
    ctx = np.asarray(cs, dtype=np.float64)
    if np.any(ctx < 1):
        raise ConfigError("context must be >= 1 token")
    sp = np.asarray(ss, dtype=np.float64)
    if np.any((sp < 0) | (sp >= 1)):
        raise ConfigError("sparsity must be in [0, 1)")
    f = lambda xs: np.asarray(xs, dtype=np.float64)  # noqa: E731
    return Points(
        context=ctx,
        w_bits=f([x.bits for x in wf]), w_scale=f([x.scale_bytes for x in wf]),
        kv_bits=f([x.bits for x in kf]), kv_scale=f([x.scale_bytes for x in kf]),
        sparsity=sp, model_sparsity=np.asarray(ms, dtype=bool),
        rate_w=f([m.mac_rate(x.mac) for m, x in zip(ms_list, wf, strict=True)]),
        rate_kv=f([m.mac_rate(x.mac) for m, x in zip(ms_list, kf, strict=True)]),
        sfu_rate=f([m.sfu_per_cycle * m.clock_hz for m in ms_list]),
        bw=f([[lv.bps(basis) for lv in m.levels] for m in ms_list]),
        carries=np.asarray([[t in lv.carries for t in TRAFFIC] for lv in ms_list[0].levels], dtype=bool),
        level_pj=f([[lv.pj_per_bit for lv in m.levels] for m in ms_list]),
        e_mac_w=f([m.mac_energy(x.mac) for m, x in zip(ms_list, wf, strict=True)]),
        e_mac_kv=f([m.mac_energy(x.mac) for m, x in zip(ms_list, kf, strict=True)]),
        e_sfu=f([m.sfu_pj for m in ms_list]),
        static_w=f([m.static_power_w for m in ms_list]),
        sfu_overlap=np.asarray([m.sfu_overlaps_mac for m in ms_list], dtype=bool),
        level_names=names,
    )


def evaluate(t: OpTable, pts: Points, per_op: bool = False) -> dict[str, np.ndarray]:
    """Per-token totals, shape (P,); with ``per_op`` also (P, N) arrays per op."""
    col = lambda a: a[:, None]  # noqa: E731
    L = t.l_eff(pts.context)  # (P, N)
    is_attn = t.kinds == "attn"
    # density of skippable FFN rows/cols: uniform sparsity, and optionally the model's own pattern
    dens = np.where(col(pts.model_sparsity), t.density[None, :], 1.0)
    dens = np.where(t.sparse_ok[None, :], np.minimum(dens, 1.0 - col(pts.sparsity)), 1.0)
    w_bytes = (t.w_elems * dens * col(pts.w_bits) / 8 + t.w_rows * col(pts.w_scale)
               + t.lookup_elems * col(pts.w_bits) / 8)
    kv_bytes = ((t.kv_ctx * L + t.kv_write) * col(pts.kv_bits) / 8
                + (t.kv_heads_ctx * L + t.kv_heads_write) * col(pts.kv_scale))
    act_bytes = (t.act_elems + t.act_ctx * L) * ACT_BYTES
    macs = t.macs * dens + t.macs_ctx * L
    sfu = t.sfu + t.sfu_ctx * L
    t_mac = macs / np.where(is_attn, col(pts.rate_kv), col(pts.rate_w))
    t_sfu = sfu / col(pts.sfu_rate)
    traffic = np.stack([w_bytes, kv_bytes, np.broadcast_to(act_bytes, w_bytes.shape)], axis=-1)  # (P,N,3)
    lvl_bytes = traffic @ pts.carries.T.astype(np.float64)  # (P, N, levels)
    t_lvl = lvl_bytes / pts.bw[:, None, :]
    t_main = np.maximum(t_mac, t_lvl.max(axis=-1))
    ov = pts.sfu_overlap
    t_token = np.where(ov, np.maximum(t_main.sum(1), t_sfu.sum(1)), (t_main + t_sfu).sum(1))
    e_pj = ((macs * np.where(is_attn, col(pts.e_mac_kv), col(pts.e_mac_w))).sum(1)
            + sfu.sum(1) * pts.e_sfu + (lvl_bytes.sum(1) * 8 * pts.level_pj).sum(1))
    e_dyn = e_pj * 1e-12
    e_static = pts.static_w * t_token
    offchip = w_bytes + kv_bytes
    out = {
        "seconds_per_token": t_token,
        "tokens_per_second": 1.0 / t_token,
        "bytes_per_token": offchip.sum(1),
        "weight_bytes_per_token": w_bytes.sum(1),
        "kv_bytes_per_token": kv_bytes.sum(1),
        "macs_per_token": macs.sum(1),
        "sfu_elems_per_token": sfu.sum(1),
        "joules_per_token": e_dyn + e_static,
        "dynamic_joules_per_token": e_dyn,
        "static_joules_per_token": e_static,
        "mac_seconds": t_mac.sum(1),
        "sfu_seconds": t_sfu.sum(1),
        "level_bytes": lvl_bytes.sum(1),  # (P, levels)
        "level_seconds": t_lvl.sum(1),
        "kv_stored_bytes": ((t.kv_store_ctx * L) * col(pts.kv_bits) / 8
                            + (t.kv_heads_write * L) * col(pts.kv_scale)).sum(1),
    }
    # the token-level bound: the resource whose busy time is largest
    busy = np.concatenate([out["mac_seconds"][:, None], out["sfu_seconds"][:, None], out["level_seconds"]], 1)
    out["bound_index"] = busy.argmax(1)
    if per_op:
        bounds = np.concatenate([t_mac[..., None], t_sfu[..., None], t_lvl], axis=-1)
        out.update(op_seconds=np.where(col(ov), np.maximum(t_main, t_sfu), t_main + t_sfu),
                   op_main_seconds=t_main,
                   op_bound_index=bounds.argmax(-1), op_macs=macs, op_sfu=sfu, op_w_bytes=w_bytes,
                   op_kv_bytes=kv_bytes, op_act_bytes=np.broadcast_to(act_bytes, w_bytes.shape),
                   op_level_bytes=lvl_bytes)
    return out


def bound_names(level_names: tuple[str, ...]) -> list[str]:
    return ["compute", "sfu", *level_names]


@dataclass
class Analysis:
    """One design point with per-op detail (what ``npukit perf`` reports and plots)."""

    table: OpTable
    machine: Machine
    weights: str
    kv: str
    context: int
    sparsity: float
    model_sparsity: bool
    basis: str
    totals: dict[str, float]
    per_op: dict[str, np.ndarray]
    bound: str
    level_names: tuple[str, ...]

    def op_bounds(self) -> list[str]:
        names = bound_names(self.level_names)
        return [names[i] for i in self.per_op["op_bound_index"]]


def analyze(table: OpTable, machine: Machine, *, weights: str = "int4", kv: str = "fp16",
            context: int = 1024, sparsity: float = 0.0, model_sparsity: bool = False,
            basis: str = "peak") -> Analysis:
    pts = points_for(machine, weights=weights, kv=kv, context=context, sparsity=sparsity,
                     model_sparsity=model_sparsity, basis=basis)
    res = evaluate(table, pts, per_op=True)
    totals = {k: float(v[0]) for k, v in res.items() if not k.startswith("op_") and np.ndim(v) == 1}
    for i, n in enumerate(pts.level_names):
        totals[f"bytes.{n}"] = float(res["level_bytes"][0, i])
        totals[f"seconds.{n}"] = float(res["level_seconds"][0, i])
    per_op = {k: v[0] for k, v in res.items() if k.startswith("op_")}
    bound = bound_names(pts.level_names)[int(res["bound_index"][0])]
    return Analysis(table, machine, weights, kv, int(context), float(sparsity), bool(model_sparsity), basis,
                    totals, per_op, bound, pts.level_names)
