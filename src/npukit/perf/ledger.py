"""The evidence ledger of one analysis: every reported number with its tier and source.

Merging with target ledgers: if the target's `npukit.registry.Target` record names a ``ledger``
(``build_ledger(hw, cfg, *, context, weights, kv, sparsity) -> Ledger``), its figures are
authoritative — a figure of the same name replaces the analytic one, which stays in the ledger as
``analytic.<name>`` so the two can be compared; figures only the target knows are appended.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from npukit import registry
from npukit.evidence import Figure, Ledger, Tier
from npukit.perf.roofline import Analysis

HEADLINES = ("tokens_per_second", "seconds_per_token", "joules_per_token")
SEED_TERN = "seeds/002 ternfpga ledger; refs/ternary.md §1.6"

# Reference points for comparison (model-specific: shown with the matching model family).
REFERENCE_POINTS: dict[str, dict[str, Figure]] = {
    "llama": {
        "ref.cpu_5950x.tokens_per_second": Figure(28.4, "tok/s", Tier.MEASURED,
            f"{SEED_TERN}: Ryzen 9 5950X, bitnet.cpp i2_s, BitNet-2B-4T, 16 threads"),
        "ref.cpu_5950x.power": Figure(121.0, "W", Tier.MEASURED, f"{SEED_TERN}: RAPL package, ~121 W"),
        "ref.cpu_5950x.joules_per_token": Figure(4.62, "J/token", Tier.MEASURED,
            f"{SEED_TERN}: RAPL 1182.6 J / 256 tokens (incl. prefill and idle: an upper bound; "
            "121 W / 28.4 tok/s would be 4.26)"),
        "ref.rtx3060.tokens_per_second": Figure(23.5, "tok/s", Tier.MEASURED,
            f"{SEED_TERN}: RTX 3060 12 GB, HF transformers bf16 (dequantized), batch 1"),
        "ref.rtx3060.power": Figure(86.4, "W", Tier.MEASURED, f"{SEED_TERN}: nvidia-smi"),
        "ref.rtx3060.joules_per_token": Figure(3.67, "J/token", Tier.MEASURED,
            f"{SEED_TERN}: 86.4 W / 23.5 tok/s"),
        "ref.ternfpga.joules_per_token": Figure(1.62, "J/token", Tier.DERIVED,
            f"{SEED_TERN}: measured cycles × 0.489 W Vivado estimate, FFN glue on fabric"),
    },
    "gemma3n": {
        "ref.cpu_pccx_notebook.tokens_per_second": Figure(0.82, "tok/s", Tier.MEASURED,
            "refs/pccx_gemma3n.md §7.3: pccx author's CPU notebook, 1218 ms/token (not llama.cpp)"),
        "ref.cpu_llamacpp_19gbps.tokens_per_second": Figure(7.1, "tok/s", Tier.DERIVED,
            "refs/pccx_gemma3n.md §7.3: llama.cpp Q4_K_M moves ~2.7 GB/token → 19.2 GB/s / 2.7 GB"),
    },
}


def _tiers(a: Analysis) -> tuple[Tier, Tier]:
    """(tier of time figures, tier of energy figures) from the machine's input figures."""
    rate = [f.tier for n, f in a.machine.figures.items()
            if n.startswith("hw.") and not (a.basis == "peak" and n.endswith("_effective"))]
    t_time = Tier.weakest(*rate) if rate else Tier.PROJECTED
    en = [f.tier for n, f in a.machine.figures.items() if n.startswith(("energy.", "power."))]
    return t_time, Tier.weakest(t_time, *en) if en else Tier.PROJECTED


def build_ledger(a: Analysis, target_tps: float | None = None, target_source: str = "") -> Ledger:
    t_time, t_energy = _tiers(a)
    tot = a.totals
    m = a.machine
    what = (f"{a.table.model} on {m.name}, weights {a.weights}, KV {a.kv}, context {a.context}, "
            f"sparsity {a.sparsity:g}{' + model top-k' if a.model_sparsity else ''}")
    rl = f"npukit.perf roofline ({a.basis} bandwidth; docs/evidence.md): {what}"
    led = Ledger()
    led.add("tokens_per_second", tot["tokens_per_second"], "tok/s", t_time, f"{rl}; bound {a.bound}")
    led.add("seconds_per_token", tot["seconds_per_token"], "s", t_time, rl)
    led.add("bytes_per_token", tot["bytes_per_token"], "B", Tier.DERIVED,
            "op counts from the model config × format bit widths (weights + KV, off-chip)")
    led.add("weight_bytes_per_token", tot["weight_bytes_per_token"], "B", Tier.DERIVED,
            "Σ streamed weight elements × bits/8 + row scales")
    led.add("kv_bytes_per_token", tot["kv_bytes_per_token"], "B", Tier.DERIVED,
            "KV read over min(context, window) per layer + KV written, with scales")
    led.add("kv_cache_bytes", tot["kv_stored_bytes"], "B", Tier.DERIVED,
            "KV stored by producer layers (sliding layers capped at the window, shared layers none)")
    led.add("macs_per_token", tot["macs_per_token"], "MAC", Tier.DERIVED, "op counts from the model config")
    led.add("sfu_elems_per_token", tot["sfu_elems_per_token"], "elem", Tier.DERIVED,
            "op counts from the model config (norms, RoPE, softmax, activations)")
    if tot["dynamic_joules_per_token"] > 0:
        led.add("joules_per_token", tot["joules_per_token"], "J/token", t_energy,
                "Σ actions × energy per action + static power × time (docs/evidence.md)")
        led.add("dynamic_joules_per_token", tot["dynamic_joules_per_token"], "J/token", t_energy,
                "Σ MACs, SFU elements and bits per memory level × their energies")
        led.add("static_joules_per_token", tot["static_joules_per_token"], "J/token", t_energy,
                f"static power {m.static_power_w:g} W × seconds per token")
    else:  # a description with a measured total power and no per-action energies
        led.add("joules_per_token", tot["joules_per_token"], "J/token", t_energy,
                "the description's total power × seconds per token (it gives no per-action "
                "energies, so no dynamic/static split)")
    led.add("average_power", tot["joules_per_token"] / tot["seconds_per_token"], "W", t_energy,
            "joules_per_token × tokens_per_second")
    led.add("compute_ceiling_tokens_per_second", 1 / max(tot["mac_seconds"], 1e-30), "tok/s", t_time,
            "1 / Σ MAC time at peak MAC rate (memory free)")
    for n in a.level_names:
        sec = tot[f"seconds.{n}"]
        led.add(f"{n}_ceiling_tokens_per_second", 1 / sec if sec > 0 else float("inf"), "tok/s", t_time,
                f"{n} bytes per token / {n} {a.basis} bandwidth (everything else free)")
        led.add(f"{n}_bytes_per_token", tot[f"bytes.{n}"], "B", Tier.DERIVED, f"traffic carried by {n}")
    cap = m.levels[0]
    need = a.table.total_params * _bits(a.weights) / 8 + tot["kv_stored_bytes"]
    led.add("model_bytes", a.table.total_params * _bits(a.weights) / 8, "B", Tier.DERIVED,
            f"all {a.table.total_params / 1e9:.3f} G checkpoint parameters at {a.weights}")
    led.add(f"fits_{cap.name}", float(need <= cap.capacity_bytes), "bool", Tier.DERIVED,
            f"model + KV cache {need / 1e9:.2f} GB vs {cap.name} {cap.capacity_bytes / 1e9:.2f} GB")
    for name, fig in m.figures.items():
        led.figures[name] = fig
    if target_tps:
        add_target_check(led, a, target_tps, target_source or "user --target-tps", t_time)
    for name, fig in REFERENCE_POINTS.get(a.table.family, {}).items():
        led.figures[name] = fig
    return led


def _bits(fmt: str) -> float:
    from npukit.perf.roofline import weight_format

    return weight_format(fmt).bits


def add_target_check(led: Ledger, a: Analysis, tps: float, source: str, tier: Tier) -> list[str]:
    """Is ``tps`` reachable, and what would it take? Returns the human notes too."""
    tot = a.totals
    have = tot["tokens_per_second"]
    led.add("target.tokens_per_second", tps, "tok/s", Tier.PROJECTED, source)
    led.add("target.reachable", float(have >= tps), "bool", tier, "tokens_per_second >= target")
    led.add("target.required_speedup", tps / have, "x", tier, "target × seconds_per_token")
    notes = []
    for n in a.level_names:
        sec = tot[f"seconds.{n}"]
        if sec * tps > 1:
            need_bw = tot[f"bytes.{n}"] * tps
            led.add(f"target.required_{n}_bandwidth", need_bw / 1e9, "GB/s", tier,
                    f"{n} bytes per token × target tok/s")
            led.add(f"target.max_{n}_bytes_per_token", tot[f"bytes.{n}"] / (sec * tps), "B", tier,
                    f"{n} bandwidth / target tok/s")
            notes.append(f"{n}: needs {need_bw / 1e9:.1f} GB/s ({sec * tps:.2f}x) or "
                         f"{sec * tps:.2f}x fewer bytes per token")
    if tot["mac_seconds"] * tps > 1:
        led.add("target.required_mac_speedup", tot["mac_seconds"] * tps, "x", tier, "Σ MAC time × target")
        notes.append(f"compute: needs {tot['mac_seconds'] * tps:.2f}x the MAC rate")
    if tot["sfu_seconds"] * tps > 1:
        notes.append(f"sfu: needs {tot['sfu_seconds'] * tps:.2f}x the SFU rate")
    verdict = "reachable" if have >= tps else "NOT reachable"
    notes.insert(0, f"target {tps:g} tok/s ({source}): {verdict} — model gives {have:.2f} tok/s, "
                    f"bound {a.bound}")
    return notes


def target_ledger(target: str, hw: Any, cfg: dict[str, Any], *, context: int, weights: str | None,
                  kv: str | None, sparsity: float | None) -> Ledger | None:
    """The target's own ledger, if its registry record names one."""
    if target not in registry.names("ledger"):
        return None
    fn = registry.get(target).resolve("ledger")
    return fn(hw, cfg, context=context, weights=weights, kv=kv, sparsity=sparsity)


def merge(analytic: Ledger, target: Ledger | None) -> Ledger:
    if target is None:
        return analytic
    out = Ledger()
    phases = sorted(n.split(".", 1)[1] for n in target if n.startswith("tokens_per_second."))
    for name, fig in analytic.items():
        if name in target:
            out.figures[f"analytic.{name}"] = fig
        elif name in HEADLINES and phases:
            # the target reports its own phases: say which one the analytic headline is not
            out.figures[name] = replace(fig, source=f"analytic roofline, no target phase (every unit at "
                                        f"peak, no host glue); per phase: {name}.<{'|'.join(phases)}> "
                                        f"below; {fig.source}")
        else:
            out.figures[name] = fig
    for name, fig in target.items():
        out.figures[name] = fig
    return out
