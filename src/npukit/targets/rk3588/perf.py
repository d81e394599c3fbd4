"""Published RK3588 figures for the SmolVLM SigLIP encoder and the timing model's error against each.

The anchors are silicon measurements by their authors (tier ``measured``, cited); the projections are
the timing model's (tier ``projected``). Each row prints both and the relative error, so the model's
standing is visible rather than tuned away.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from npukit.evidence import Ledger, Tier
from npukit.targets.rk3588.hw import RK3588HW

SHARD_BLOG = "amohan.dev/blog/2025/shard-optimizing-vision-transformers-edge-npu (SHARD, Dec 2025)"
OPENNPU = "poad42/opennpu_rk3588 docs/ref/VISION_ENCODER_NPU_VS_CPU.md"


@dataclass(frozen=True)
class Anchor:
    name: str
    value_ms: float
    source: str
    schedule: str | None  # the schedule that projects it (None: a CPU figure)
    batch: int = 1
    per_input: bool = False
    note: str = ""


ANCHORS = (
    Anchor("SHARD 3-core round-robin, 1 image", 1800.0, SHARD_BLOG + ": '< 1.8 seconds', 26 shards",
           "round-robin", 1, note="an upper bound ('<')"),
    Anchor("opennpu 1 core, 1 image (one RKNN model)", 911.0, OPENNPU + ": 'Single image 911ms'", "single"),
    Anchor("opennpu 1 core, 12 per-layer models summed", 1402.0, OPENNPU + ": per-layer table TOTAL 1402 ms",
           "single"),
    Anchor("opennpu 3-core data-parallel, per image (batch 6)", 370.0,
           OPENNPU + ": '3-core parallel: 370ms/image'", "data-parallel", 6, per_input=True),
    Anchor("SHARD CPU baseline (PyTorch on the RK3588 CPU)", 30000.0, SHARD_BLOG + ": '~30.0 seconds'", None),
    Anchor("opennpu CPU (ONNX on the RK3588 CPU)", 2500.0,
           OPENNPU + ": '~2500ms (2291ms per-layer + conv2d)'", None),
)


def compare(projected: dict[tuple[str, int], Any], cpu_here_ms: float | None = None) -> list[dict[str, Any]]:
    """One row per anchor: published value, projection (or the CPU measured here), relative error.

    ``projected`` maps (schedule, batch) to a `TimingReport`.
    """
    rows = []
    for a in ANCHORS:
        row: dict[str, Any] = {"figure": a.name, "published_ms": a.value_ms, "published_tier": "measured",
                               "source": a.source, "note": a.note}
        if a.schedule is None:
            row.update(model_ms=cpu_here_ms, model_tier="measured" if cpu_here_ms else None,
                       model_source="transformers fp32 on this machine's CPU (same encoder, same run)",
                       error=None)
        else:
            rep = projected.get((a.schedule, a.batch))
            ms = None if rep is None else (rep.per_input_ms if a.per_input else rep.latency_ms)
            row.update(model_ms=ms, model_tier="projected", model_source=f"timing model, {a.schedule}, "
                       f"batch {a.batch}", error=None if ms is None else ms / a.value_ms - 1.0)
        rows.append(row)
    return rows


def order_holds(projected: dict[tuple[str, int], Any]) -> bool:
    """The published order: 1 core slower than the best 3-core schedule per image."""
    single = projected[("single", 1)].latency_ms
    best3 = min(r.per_input_ms for (s, _), r in projected.items() if s in ("pipeline", "data-parallel"))
    return single > best3


def ledger(hw: RK3588HW, cfg: Any = None, **_: Any) -> Ledger:
    """The target's evidence ledger: every number of the hardware description, tiered."""
    led = hw.ledger()
    for a in ANCHORS:
        led.add(f"anchor: {a.name}", a.value_ms, "ms", Tier.MEASURED, a.source)
    return led
