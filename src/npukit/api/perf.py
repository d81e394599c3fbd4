"""Analytic performance and energy (`estimate`), design-space sweeps (`sweep`) and hardware
descriptions (`hardware`). Every figure is a `npukit.evidence.Figure` with its evidence tier."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from npukit.api.models import Model
from npukit.errors import ConfigError

if TYPE_CHECKING:
    from npukit.evidence import Figure, Ledger

# Targets whose seeds state a decode-rate goal; checked unless target_tps overrides.
DEFAULT_GOALS = {"pccx": (20.0, "seeds/000 pccx gemma3n_execution.rst §6 (target, nothing measured)")}

ModelSpec = Model | str | Path | dict[str, Any]


@dataclass
class PerfReport:
    """One decode token of a model on a hardware description: the ``ledger`` of tiered figures
    (tokens/s, seconds, bytes, MACs, joules, the target's own ledger merged in), the ``bound``
    (what limits it), explanatory ``notes``, and the underlying ``analysis`` (per-op arrays)."""

    ledger: Ledger
    bound: str
    notes: list[str]
    target: str
    weights: str
    has_target_ledger: bool
    analysis: Any = field(repr=False)

    @property
    def tokens_per_second(self) -> Figure:
        return self.ledger["tokens_per_second"]

    @property
    def joules_per_token(self) -> Figure:
        return self.ledger["joules_per_token"]

    def to_json(self) -> dict[str, Any]:
        return {**self.ledger.to_json(), "bound": self.bound, "notes": self.notes,
                "target_ledger": self.has_target_ledger}


def _config(model: ModelSpec) -> tuple[dict[str, Any] | str | Path, str]:
    if isinstance(model, Model):
        return model.config, Path(model.name).name
    if isinstance(model, dict):
        return model, str(model.get("model_type", "model"))
    return model, str(model)


def hardware(name: str | Path, overrides: Sequence[str] | Mapping[str, Any] = ()) -> Any:
    """A hardware description (the target's dataclass) from a preset name or TOML file, with
    ``"key=value"`` overrides (``{"gemv.cores_log2": 3}`` works too)."""
    from npukit.hw import load_hw

    return load_hw(name, dict(overrides) if isinstance(overrides, Mapping) else list(overrides))


def hardware_presets() -> list[str]:
    """Names of the shipped hardware presets."""
    from npukit.hw import preset_names

    return preset_names()


def estimate(model: ModelSpec, hw: str | Path, *, weights: str | None = None, kv: str = "fp16",
             context: int = 1024, sparsity: float | str | None = None, overrides: Sequence[str] = (),
             basis: str = "peak", target_tps: float | None = None) -> PerfReport:
    """Analytic roofline, energy and evidence ledger of one decode token.

    ``model``: a `Model`, a model preset name, a ``config.json`` path or a config dict. ``hw``: a
    hardware preset or TOML. ``weights``: int4 (default; ternary for BitNet), int8, fp16, fp8-e4m3,
    ...; ``kv``: fp16 | int8 | int4; ``sparsity``: FFN activation sparsity in [0, 1) or ``"model"``
    (the model's own top-k); ``overrides``: hardware fields or ``perf.<key>=value``; ``basis``:
    ``"peak"`` (an upper bound) or ``"effective"`` bandwidth; ``target_tps``: a decode rate to check.
    """
    from npukit.evidence import Tier
    from npukit.perf import ledger as lg
    from npukit.perf.machine import load_machine, target_of
    from npukit.perf.ops import build_ops
    from npukit.perf.roofline import analyze

    desc, machine = load_machine(str(hw), list(overrides))
    cfg, label = _config(model)
    table = build_ops(cfg, name=label)
    weights = weights or ("ternary" if table.config.get("model_type") == "bitnet" else "int4")
    maxpos = table.config.get("max_position_embeddings")
    if context < 1:
        raise ConfigError(f"context must be >= 1, got {context}")
    if maxpos and context > int(maxpos):
        raise ConfigError(f"context {context} exceeds the model's max_position_embeddings {maxpos}")
    sp, model_sp = _sparsity(sparsity)

    def run(model_sparsity: bool, b: str) -> Any:
        return analyze(table, machine, weights=weights, kv=kv, context=context, sparsity=sp,
                       model_sparsity=model_sparsity, basis=b)

    a = run(model_sp, basis)
    target = target_of(desc)
    tps, src = (target_tps, "target_tps") if target_tps else DEFAULT_GOALS.get(target, (None, ""))
    led = lg.build_ledger(a)
    notes: list[str] = []
    if tps:
        notes = lg.add_target_check(led, a, tps, src, led["tokens_per_second"].tier)
        if not model_sp and table.density.min() < 1:
            b = run(True, basis)
            led.add("with_model_sparsity.tokens_per_second", b.totals["tokens_per_second"], "tok/s",
                    led["tokens_per_second"].tier, "same roofline with the model's own FFN top-k skipping")
            notes.append(f"with the model's FFN top-k skipping: {b.totals['tokens_per_second']:.2f} tok/s")
    if basis == "peak":
        e = run(model_sp, "effective")
        led.add("tokens_per_second_effective_bw", e.totals["tokens_per_second"], "tok/s", Tier.PROJECTED,
                "same roofline at the effective (sustained) bandwidths of the description")
    tl = lg.target_ledger(target, desc, table.config, context=context, weights=weights, kv=kv,
                          sparsity=None if model_sp else sp)
    led = lg.merge(led, tl)
    phases = {n.split(".", 1)[1]: f.value for n, f in led.items() if n.startswith("tokens_per_second.")}
    if phases:
        each = ", ".join(f"{ph} {v:.3g}" for ph, v in phases.items())
        notes.append(f"tokens_per_second {a.totals['tokens_per_second']:.3g} is the analytic roofline "
                     f"(no target phase); the target's own phases, tok/s: {each}")
    return PerfReport(led, a.bound, notes, target, weights, tl is not None, a)


def _sparsity(value: float | str | None) -> tuple[float, bool]:
    if value is None:
        return 0.0, False
    if value == "model":
        return 0.0, True
    try:
        s = float(value)
    except ValueError:
        raise ConfigError(f"sparsity must be a number in [0,1) or 'model', got {value!r}") from None
    if not 0 <= s < 1:
        raise ConfigError(f"sparsity must be in [0, 1), got {s}")
    return s, False


@dataclass
class SweepResult:
    """Every evaluated point (``rows``: the axes' values, tokens_per_second, joules_per_token, their
    tiers, bound) and the indices of the Pareto-optimal ones (``pareto``: most tok/s for least J)."""

    rows: list[dict[str, Any]]
    pareto: list[int]
    axes: dict[str, list[Any]]

    def front(self) -> list[dict[str, Any]]:
        """The Pareto-optimal rows, fastest first."""
        return sorted((self.rows[i] for i in self.pareto), key=lambda r: -r["tokens_per_second"])

    def write(self, path: str | Path) -> None:
        """Write every row as CSV, or Parquet for a ``.parquet`` path."""
        from npukit.perf.sweep import write_table

        write_table(self.rows, path)


def sweep(model: ModelSpec, hw: str | Path, grid: Mapping[str, Sequence[Any] | str], *,
          weights: str = "int4", kv: str = "fp16", context: int = 1024, sparsity: float = 0.0,
          overrides: Sequence[str] = (), basis: str = "peak", workers: int = 1,
          ray_address: str | None = None) -> SweepResult:
    """Evaluate the analytic model over a grid. ``grid`` maps an axis (weights, kv, context,
    sparsity, clock_mhz, lanes, ddr_gbps, static_power_w, ``perf.<key>`` or a hardware field such
    as ``gemv.cores_log2``) to its values, or to the CLI's text form (``"100:400:16"``,
    ``"int4,int8"``). ``workers`` > 1 uses local processes; ``ray_address`` a Ray cluster."""
    from npukit.perf.ops import build_ops
    from npukit.perf.sweep import Sweep, axes_from, pareto_front, run_sweep

    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")
    axes = axes_from(f"{k}={v if isinstance(v, str) else ','.join(map(str, v))}" for k, v in grid.items())
    cfg, label = _config(model)
    table = build_ops(cfg, name=label)
    sw = Sweep(str(hw), table, axes, {"weights": weights, "kv": kv, "context": context,
                                      "sparsity": sparsity}, list(overrides), basis)
    rows = run_sweep(sw, workers=workers, ray_address=ray_address)
    return SweepResult(rows, pareto_front(rows), axes)
