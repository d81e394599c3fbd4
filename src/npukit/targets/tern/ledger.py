"""The tern evidence ledger: ternfpga's system configurations, regenerated from the microarchitecture,
the model's shapes and the measured inputs of a hardware preset (no per-figure constants).

Per decoder layer:

* engine — Σ over the seven projections of ``out · ceil(in/K)`` tiles × cycles/tile (derived from the
  measured 1.00 cycle/tile), raised to the DDR3 rate if K lanes would out-run the measured read
  bandwidth;
* fabric attention — ``heads × attention_cycles(T, D)`` (the unit's FSM, `units.AttentionTiming`);
* fabric FFN glue — ``ffn_glue_cycles(F)`` (`units.FFNGlueTiming`);
* host glue — the soft CPU's measured norm / RoPE / attention / FFN-glue cycles, scaled linearly when
  the model's shapes or the context differ from the measurement (then tiered ``projected``).

Phases (seeds/002): ``host-split`` (all glue on the CPU), ``fabric-attention``, ``fabric-ffn-glue``
(norms and RoPE stay on the CPU), ``engine-bound`` (norms/RoPE on fabric as well: projected).
Per token: ``layers × layer + LM head`` engine cycles (ternfpga streams the tied LM head through the
engine at the same tile rate); time = cycles / clock; energy = (dynamic + static power) × time.
"""

from __future__ import annotations

import math
from typing import Any

from npukit.errors import ConfigError
from npukit.evidence import Ledger, Tier
from npukit.targets.tern.hw import TernHW
from npukit.targets.tern.units import attention_cycles, ffn_glue_cycles

PHASES = ("host-split", "fabric-attention", "fabric-ffn-glue", "engine-bound")
SEED = "seeds/002"
# weight formats the engine can stream, in bits per weight (None: the preset's base-3 1.6)
WEIGHT_BITS = {"ternary": None, "base3": None, "tq1_0": 1.6875, "tq2_0": 2.0625, "i2_s": 2.0,
               "ternary-i2s": 2.0, "hf2bit": 2.0}
KV_BITS = {"int16": 16, "fp16": 16, "bf16": 16, "int8": 8, "int4": 4}


def model_shapes(cfg: dict[str, Any]) -> dict[str, int]:
    try:
        h = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        inter = cfg["intermediate_size"]
        inter = int(max(inter)) if isinstance(inter, list) else int(inter)
        return {"hidden": h, "inter": inter, "layers": int(cfg["num_hidden_layers"]), "heads": heads,
                "kv_heads": int(cfg.get("num_key_value_heads", heads)),
                "head_dim": int(cfg.get("head_dim") or h // heads), "vocab": int(cfg["vocab_size"])}
    except KeyError as exc:
        raise ConfigError(f"model config is missing {exc.args[0]!r}") from None


def engine_tiles_per_layer(s: dict[str, int], lanes: int, down_active: int | None = None) -> int:
    h, f, qd, kvd = s["hidden"], s["inter"], s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"]
    nt = lambda n: -(-n // lanes)  # noqa: E731
    down_in = f if down_active is None else down_active
    return qd * nt(h) + 2 * kvd * nt(h) + h * nt(qd) + 2 * f * nt(h) + h * nt(down_in)


def build_ledger(hw: TernHW, model_config: dict[str, Any], *, context: int, weights: str | None = None,
                 kv: str | None = None, sparsity: float | None = None) -> Ledger:
    if not isinstance(hw, TernHW):
        raise ConfigError(f"tern ledger needs a tern hardware description, got {type(hw).__name__}")
    if context < 1:
        raise ConfigError(f"context must be >= 1, got {context}")
    if weights is not None and weights not in WEIGHT_BITS:
        raise ConfigError(f"the tern engine streams ternary weights only ({', '.join(WEIGHT_BITS)}), "
                          f"not {weights!r}")
    if kv is not None and kv not in KV_BITS:
        raise ConfigError(f"unknown KV format {kv!r} (known: {', '.join(KV_BITS)})")
    if sparsity is not None and not 0 <= sparsity < 1:
        raise ConfigError(f"sparsity must be in [0, 1), got {sparsity}")
    s = model_shapes(model_config)
    led = Ledger()
    pre = f"preset {hw.name}"
    _inputs(led, hw, pre)
    bpw = WEIGHT_BITS.get(weights or "ternary") or hw.engine.bits_per_weight
    core = _core(hw, s, context, hw.engine.lanes, bpw)
    _emit_core(led, hw, s, core, context, pre)
    _emit_phases(led, hw, s, core, "", pre)
    _emit_memory(led, hw, s, core, context, bpw, KV_BITS.get(kv or "int16", 16), pre)
    _emit_whatifs(led, hw, s, context, bpw, sparsity, pre)
    return led


# -- pieces -----------------------------------------------------------------------------------------
def _inputs(led: Ledger, hw: TernHW, pre: str) -> None:
    e, p, d = hw.engine, hw.power, hw.ddr
    led.add("input.clock", hw.clock_mhz, "MHz", Tier.MEASURED, hw.clock_source or pre)
    led.add("input.engine_cycles_per_tile", e.cycles_per_tile, "cycles", e.tier, f"{pre}: {e.source}")
    led.add("input.power", p.total_w, "W", p.tier, f"{pre}: {p.source}")
    led.add("input.power_static", p.static_w, "W", p.tier, f"{pre}: {p.source}")
    led.add("input.ddr_read_bandwidth", d.read_mbps, "MB/s", d.tier, f"{pre}: {d.source}")


def _host_scale(hw: TernHW, s: dict[str, int], context: int) -> tuple[dict[str, float], bool]:
    h = hw.host
    att = (s["heads"] * s["head_dim"] * context) / (h.heads * h.head_dim * h.context)
    rope = ((s["heads"] + s["kv_heads"]) * s["head_dim"]) / ((h.heads + h.kv_heads) * h.head_dim)
    scale = {"norm": s["hidden"] / h.hidden, "rope": rope, "attention": att,
             "ffn": s["inter"] / h.intermediate}
    exact = all(v == 1.0 for v in scale.values())
    # attn_sub_norm's requant pass is host work that ternfpga's composition leaves out: listed as its
    # own figure (one norm pass over q_dim at the measured rate), not summed into the phases
    sub = h.norm_cycles / 2 * (s["heads"] * s["head_dim"]) / h.hidden
    return {"norm": h.norm_cycles * scale["norm"], "rope": h.rope_cycles * scale["rope"],
            "attention": h.attention_cycles * scale["attention"],
            "ffn": h.ffn_glue_cycles * scale["ffn"], "sub_norm": sub}, exact


def _core(hw: TernHW, s: dict[str, int], context: int, lanes: int, bpw: float,
          down_active: int | None = None) -> dict[str, Any]:
    # a tile needs K·bpw/8 bytes; if DDR3 cannot deliver them in cycles_per_tile, DDR3 sets the pace
    ddr_bytes_per_cycle = hw.ddr.read_mbps * 1e6 / hw.clock_hz
    cpt = max(hw.engine.cycles_per_tile, lanes * bpw / 8 / ddr_bytes_per_cycle)
    tiles = engine_tiles_per_layer(s, lanes, down_active)
    host, exact = _host_scale(hw, s, context)
    return {
        "cpt": cpt, "ddr_bound": cpt > hw.engine.cycles_per_tile, "lanes": lanes,
        "engine": tiles * cpt, "lm_head": s["vocab"] * -(-s["hidden"] // lanes) * cpt,
        "attn_query": attention_cycles(context, s["head_dim"], hw.attention.timing),
        "attn_fabric": s["heads"] * attention_cycles(context, s["head_dim"], hw.attention.timing),
        "ffn_fabric": ffn_glue_cycles(s["inter"], hw.ffn_glue.timing), "host": host, "host_exact": exact,
        "attn_fits": context <= hw.attention.t_max,
    }


def _layer(core: dict[str, Any], phase: str) -> float:
    h = core["host"]
    glue = {
        "host-split": h["norm"] + h["rope"] + h["attention"] + h["ffn"],
        "fabric-attention": h["norm"] + h["rope"] + core["attn_fabric"] + h["ffn"],
        "fabric-ffn-glue": h["norm"] + h["rope"] + core["attn_fabric"] + core["ffn_fabric"],
        "engine-bound": 0.0,
    }[phase]
    return core["engine"] + glue


def _emit_core(led: Ledger, hw: TernHW, s: dict[str, int], core: dict[str, Any], context: int,
               pre: str) -> None:
    e_tier = Tier.weakest(Tier(hw.engine.tier), Tier(hw.ddr.tier) if core["ddr_bound"] else Tier.DERIVED)
    K = core["lanes"]
    led.add("engine_cycles_per_layer", core["engine"], "cycles", e_tier,
            f"Σ out·ceil(in/K) over q,k,v,o,gate,up,down = {engine_tiles_per_layer(s, K):,} tiles (K={K}) "
            f"× {core['cpt']:g} cycle/tile ({pre} engine)")
    led.add("lm_head_cycles", core["lm_head"], "cycles", e_tier,
            f"vocab·ceil(hidden/K) tiles: ternfpga streams the tied LM head on the engine ({SEED} Phase 4)")
    fits = context <= hw.attention.t_max
    a = hw.attention
    led.add("attention_cycles_per_query", core["attn_query"], "cycles",
            Tier.DERIVED if fits else Tier.PROJECTED,
            f"attention_unit FSM: (T·D+{a.mac_drain}) + (T+{a.exp_pipe}) + (T·D+{a.mac_drain}) + {a.fin}, "
            f"T={context}, D={s['head_dim']} ({a.source})"
            + ("" if fits else f"; T > t_max={a.t_max}: needs KV tiling, not built"))
    led.add("attention_cycles_per_layer", core["attn_fabric"], "cycles",
            Tier.DERIVED if fits else Tier.PROJECTED,
            f"{s['heads']} query heads × attention_cycles_per_query")
    g = hw.ffn_glue
    led.add("ffn_glue_cycles_per_layer", core["ffn_fabric"], "cycles", Tier.DERIVED,
            f"ffn_glue_unit FSM: 2·(F+{g.bram_read}+{g.pipe_stages}+{g.detect}) + ({g.divider_bits}+1) + "
            f"{g.fin}, F={s['inter']} ({g.source})")
    host_tier = Tier(hw.host.tier) if core["host_exact"] else Tier.PROJECTED
    src = hw.host.source if core["host_exact"] else (
        f"{hw.host.source}; scaled linearly to this model's shapes and T={context} "
        f"(measured at T={hw.host.context})")
    for k, v in core["host"].items():
        if k == "sub_norm":
            led.add("host_glue_cycles_per_layer.sub_norm", v, "cycles", Tier.PROJECTED,
                    f"{pre}: attn_sub_norm requant, one norm pass over q_dim at the measured norm rate; "
                    f"not in ternfpga's composition, so not in cycles_per_layer.*")
            continue
        led.add(f"host_glue_cycles_per_layer.{k}", v, "cycles", host_tier, f"{pre}: {src}")


def _phase_tier(hw: TernHW, core: dict[str, Any], phase: str) -> Tier:
    if phase == "engine-bound":
        return Tier.PROJECTED  # norms and RoPE on the fabric: not built (seeds/002 ledger)
    parts = [Tier(hw.engine.tier), Tier(hw.host.tier) if core["host_exact"] else Tier.PROJECTED]
    if core["ddr_bound"]:
        parts.append(Tier(hw.ddr.tier))
    if phase != "host-split" and not core["attn_fits"]:
        parts.append(Tier.PROJECTED)
    return Tier.weakest(*parts)


def _emit_phases(led: Ledger, hw: TernHW, s: dict[str, int], core: dict[str, Any], prefix: str,
                 pre: str) -> None:
    for ph in PHASES:
        layer = _layer(core, ph)
        tok = s["layers"] * layer + core["lm_head"]
        sec = tok / hw.clock_hz
        tier = _phase_tier(hw, core, ph)
        how = {"host-split": "engine + all glue on the soft CPU",
               "fabric-attention": "engine + attention unit; norms, RoPE, FFN glue on the CPU",
               "fabric-ffn-glue": "engine + attention unit + FFN-glue unit; norms, RoPE on the CPU",
               "engine-bound": "engine only (norms/RoPE on fabric: not built)"}[ph]
        led.add(f"{prefix}cycles_per_layer.{ph}", layer, "cycles", tier, how)
        led.add(f"{prefix}cycles_per_token.{ph}", tok, "cycles", tier,
                f"{s['layers']} × cycles_per_layer.{ph} + lm_head_cycles")
        led.add(f"{prefix}tokens_per_second.{ph}", 1.0 / sec, "tok/s", tier,
                f"clock {hw.clock_mhz:g} MHz / cycles_per_token.{ph}")
        led.add(f"{prefix}joules_per_token.{ph}", hw.power.total_w * sec, "J/token",
                Tier.weakest(tier, Tier(hw.power.tier)),
                f"(dynamic {hw.power.dynamic_w:g} W + static {hw.power.static_w:g} W) × "
                f"cycles_per_token.{ph} / clock ({pre} power)")


def _emit_memory(led: Ledger, hw: TernHW, s: dict[str, int], core: dict[str, Any], context: int,
                 bpw: float, kv_bits: int, pre: str) -> None:
    d, b = hw.ddr, hw.bram
    weights = s["layers"] * engine_tiles_per_layer(s, 1) + s["vocab"] * s["hidden"]
    wbytes = weights * bpw / 8
    dt = Tier.weakest(Tier(d.tier))
    led.add("weight_bytes_per_token", wbytes, "B", Tier.DERIVED,
            f"{weights:,} weights (layers + LM head, as ternfpga counts) × {bpw:g} bit")
    led.add("ddr_floor_seconds_per_token", wbytes / (d.read_mbps * 1e6), "s", dt,
            f"weight_bytes_per_token / {d.read_mbps:g} MB/s ({pre} ddr)")
    led.add("engine_weight_demand", core["lanes"] * bpw / 8 * hw.clock_hz / core["cpt"] / 1e6, "MB/s",
            Tier.DERIVED, f"K={core['lanes']} weights × {bpw:g} bit per tile per {core['cpt']:g} cycles")
    led.add("ddr_saturating_lanes", d.read_mbps * 1e6 / (bpw / 8 * hw.clock_hz), "lanes", dt,
            "lanes at which one tile per cycle needs the whole measured DDR3 read rate")
    led.add("model_fits_ddr", float(wbytes <= d.size_mb * 2**20), "bool", Tier.DERIVED,
            f"weight bytes vs {d.size_mb} MB DDR3")
    kv_layer = 2 * s["kv_heads"] * s["head_dim"] * context * kv_bits / 8
    led.add("kv_bytes_per_layer", kv_layer, "B", Tier.DERIVED,
            f"2 · kv_heads · head_dim · T={context} · {kv_bits} bit")
    combos = {"soc_engine+ffn_glue": b.soc_engine + b.ffn_glue,
              "soc_engine+attention": b.soc_engine + b.attention,
              "soc_engine+attention+ffn_glue": b.soc_engine + b.attention + b.ffn_glue}
    for name, tiles in combos.items():
        # only the engine + FFN-glue pair was built and placed; other sums are derived from block sizes
        bt = Tier(b.tier) if name == "soc_engine+ffn_glue" else Tier.weakest(Tier(b.tier))
        led.add(f"bram_tiles.{name}", tiles, "BRAM36", bt, f"{pre}: {b.source}")
        led.add(f"bram_fits.{name}", float(tiles <= b.total), "bool", bt,
                f"{tiles:g} of the part's {b.total} BRAM36 ({hw.board.part})")


def _emit_whatifs(led: Ledger, hw: TernHW, s: dict[str, int], context: int, bpw: float,
                  sparsity: float | None, pre: str) -> None:
    ph = "fabric-ffn-glue"
    for K in sorted({8, 16, 32, 64, 128} - {hw.engine.lanes}):
        c = _core(hw, s, context, K, bpw)
        tok = s["layers"] * _layer(c, ph) + c["lm_head"]
        note = "DDR3-bound" if c["ddr_bound"] else "compute-bound"
        led.add(f"whatif.lanes_{K}.cycles_per_token.{ph}", tok, "cycles", Tier.PROJECTED,
                f"K={K} lanes at 1 tile/cycle ({note}: {c['cpt']:.3g} cycle/tile); glue unchanged")
        led.add(f"whatif.lanes_{K}.joules_per_token.{ph}", hw.power.total_w * tok / hw.clock_hz, "J/token",
                Tier.PROJECTED, "same power (assumes power does not grow with K, as ternfpga does)")
    for T in (128, 512, 2048):
        if context == T:
            continue
        c = _core(hw, s, T, hw.engine.lanes, bpw)
        led.add(f"whatif.context_{T}.attention_cycles_per_query", c["attn_query"], "cycles", Tier.PROJECTED,
                f"attention FSM at T={T}"
                + ("" if hw.attention.t_max >= T else f" (> t_max={hw.attention.t_max})"))
        for p in ("host-split", ph):
            led.add(f"whatif.context_{T}.cycles_per_token.{p}", s["layers"] * _layer(c, p) + c["lm_head"],
                    "cycles", Tier.PROJECTED, f"host attention scaled linearly in T; unit FSM at T={T}")
    sps = [("measured", 0.598), ("relufied", 0.85)] if sparsity is None else [("given", sparsity)]
    for label, sp in sps:
        active = math.ceil((1 - sp) * s["inter"])
        c = _core(hw, s, context, hw.engine.lanes, bpw, down_active=active)
        for p in (ph, "engine-bound"):
            tok = s["layers"] * _layer(c, p) + c["lm_head"]
            src = (f"down_proj gathers only the {active} of {s['inter']} nonzero columns at sparsity {sp:g} "
                   f"(ceil(active/K) tiles per row; index compaction + DMA gather not built)")
            if label == "measured":
                src += f"; {SEED} measured 59.8% zeros on BitNet-2B-4T"
            led.add(f"whatif.sparsity_{label}.cycles_per_token.{p}", tok, "cycles", Tier.PROJECTED, src)
            led.add(f"whatif.sparsity_{label}.joules_per_token.{p}", hw.power.total_w * tok / hw.clock_hz,
                    "J/token", Tier.PROJECTED, f"{src}; same power")
    from npukit.hw import load_hw

    for other in ("tern-arty-a7-100t", "tern-arty-a7-35t"):
        if other == hw.name:
            continue
        o = load_hw(other, expect="tern")
        all3 = o.bram.soc_engine + o.bram.attention + o.bram.ffn_glue
        led.add(f"whatif.board_{other}.bram_fits.soc_engine+attention+ffn_glue",
                float(all3 <= o.bram.total), "bool", Tier.PROJECTED,
                f"{all3:g} of {o.bram.total} BRAM36 ({o.board.part}; {o.bram.source})")
