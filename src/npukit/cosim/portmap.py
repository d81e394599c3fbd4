"""The port map: which golden-vector field drives or checks which port of a design, and how.

A TOML file (docs/cosim.md has the full reference and a worked example)::

    unit = "attention"                # the vectors unit the design implements
    top = "attention_unit"            # top module
    sources = ["attention_unit.sv"]   # relative to this file
    [parameters]                      # optional Verilog parameter overrides
    [clock]      port, period_ns
    [reset]      port, active (level that resets), cycles
    [control]    start, done, busy, latency, timeout_cycles, cycle_counter, mode ("case" | "elementwise")
    [[in]]       field, kind = "port" | "memory" | "stream", ...
    [[out]]      field, kind = "port" | "memory" | "stream", ...
    [[const]]    port, value

Everything is checked here, before anything is built: a bad map is a `ConfigError` (one line).
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from npukit.errors import ConfigError

KINDS = ("port", "memory", "stream")
MODES = ("case", "elementwise")


@dataclass
class Binding:
    """One field on one port (kind "port"), memory port ("memory") or stream ("stream").

    ``per_word`` elements travel in one port word, element 0 in the low bits, each ``bits`` wide
    (default: the port's width / per_word; for a whole array on one port, / the array's size).
    ``signed`` says how output bits are read back (default: the field's own signedness).
    """

    field: str
    kind: str = "port"
    port: str | None = None  # kind "port": the data port
    data: str | None = None  # memory / stream: the data port
    addr: str | None = None  # memory: write (in) or read (out) address
    we: str | None = None  # memory in: write enable
    en: str | None = None  # memory out: read enable (optional)
    valid: str | None = None  # stream: valid
    ready: str | None = None  # stream: ready (optional)
    last: str | None = None  # stream in: asserted with the final word (optional)
    per_word: int = 1
    bits: int | None = None
    signed: bool | None = None
    addr_offset: int = 0
    row_stride: int | None = None  # memory: words from row r to row r+1 (default: packed rows)
    read_latency: int = 1  # memory out: cycles from address to data
    once: bool = False  # memory in: load before the first case only (tables the same in every case)
    addr_step: int = 1  # memory: address increment from one word to the next (e.g. 4 for byte addresses)
    transpose: bool = False  # in: a 2-D field sent column by column (e.g. V stored d-major)
    set: dict[str, int] = field(default_factory=dict)  # other ports held at these values meanwhile

    def ports(self) -> list[str]:
        names = (self.port, self.data, self.addr, self.we, self.en, self.valid, self.ready, self.last)
        return [p for p in names if p]


@dataclass
class PortMap:
    path: Path
    unit: str
    top: str
    sources: list[Path]
    parameters: dict[str, int]
    clock: str | None
    period_ns: float
    reset: str | None
    reset_active: int
    reset_cycles: int
    start: str | None
    done: str | None
    busy: str | None
    latency: int
    timeout_cycles: int
    cycle_counter: str | None
    mode: str
    inputs: list[Binding] = field(default_factory=list)
    outputs: list[Binding] = field(default_factory=list)
    consts: dict[str, int] = field(default_factory=dict)
    active_low: list[str] = field(default_factory=list)  # 1-bit ports asserted by 0 (we_n, start_n)
    reset_every_case: bool = False
    limits: dict[str, int] = field(default_factory=dict)  # scalar field -> largest value the design takes

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["path"] = str(self.path)
        d["sources"] = [str(s) for s in self.sources]
        return d


def _table(doc: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    t = doc.get(key, {})
    if not isinstance(t, dict):
        raise ConfigError(f"{where}: [{key}] must be a table")
    return t


def _known(t: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(t) - allowed)
    if extra:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(extra)} (known: {', '.join(sorted(allowed))})")


def _typed(t: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str,
           default: Any = None) -> Any:
    v = t.get(key, default)
    if v is not None and (not isinstance(v, kind) or (kind is int and isinstance(v, bool))):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ConfigError(f"{where}: {key} must be {names}, got {v!r}")
    return v


_BINDING_KEYS = {f for f in Binding.__dataclass_fields__}


def _binding(t: Any, direction: str, n: int, where: str) -> Binding:
    at = f"{where}: [[{direction}]] #{n + 1}"
    if not isinstance(t, dict):
        raise ConfigError(f"{at} must be a table")
    _known(t, _BINDING_KEYS, at)
    if not isinstance(t.get("field"), str):
        raise ConfigError(f"{at}: 'field' (the vector field's name) is required")
    at = f"{where}: {direction} field {t['field']!r}"
    for k in ("port", "data", "addr", "we", "en", "valid", "ready", "last"):
        _typed(t, k, str, at)
    for k in ("per_word", "bits", "addr_offset", "row_stride", "read_latency", "addr_step"):
        _typed(t, k, int, at)
    for k in ("signed", "once", "transpose"):
        _typed(t, k, bool, at)
    held = _typed(t, "set", dict, at, {})
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in held.values()):
        raise ConfigError(f"{at}: set maps port names to integers")
    b = Binding(**t)
    if b.kind not in KINDS:
        raise ConfigError(f"{at}: kind {b.kind!r} is not one of {', '.join(KINDS)}")
    need = {"port": ("port",), "memory": ("data", "addr") + (("we",) if direction == "in" else ()),
            "stream": ("data", "valid")}[b.kind]
    missing = [k for k in need if getattr(b, k) is None]
    if missing:
        raise ConfigError(f"{at}: kind {b.kind!r} needs {', '.join(missing)}")
    if b.per_word < 1 or (b.bits is not None and b.bits < 1) or b.read_latency < 0 or b.addr_offset < 0 \
            or b.addr_step < 1:
        raise ConfigError(f"{at}: per_word, bits and addr_step must be >= 1; read_latency, addr_offset >= 0")
    if b.once and not (direction == "in" and b.kind == "memory"):
        raise ConfigError(f"{at}: once applies to input memories only")
    if b.transpose and not (direction == "in" and b.kind in ("memory", "stream")):
        raise ConfigError(f"{at}: transpose applies to input memories and streams only")
    return b


def load(path: str | Path) -> PortMap:
    """Read and check a port map file; `ConfigError` on anything wrong with it."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"port map {str(p)!r} not found")
    try:
        doc = tomllib.loads(p.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{p}: not valid TOML ({e})") from None
    where = str(p)
    _known(doc, {"unit", "top", "sources", "parameters", "clock", "reset", "control", "in", "out", "const",
                 "active_low", "limits"}, where)
    low = doc.get("active_low", [])
    if not isinstance(low, list) or not all(isinstance(x, str) for x in low):
        raise ConfigError(f"{where}: active_low must be a list of port names")
    for k in ("unit", "top"):
        if not isinstance(doc.get(k), str) or not doc[k]:
            raise ConfigError(f"{where}: {k!r} is required (a string)")
    srcs = doc.get("sources")
    if not isinstance(srcs, list) or not srcs or not all(isinstance(s, str) for s in srcs):
        raise ConfigError(f"{where}: 'sources' must be a non-empty list of file names")
    params = _table(doc, "parameters", where)
    limits = _table(doc, "limits", where)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in limits.values()):
        raise ConfigError(f"{where}: [limits] values must be integers (a scalar field's largest value)")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in params.values()):
        raise ConfigError(f"{where}: [parameters] values must be integers")
    clk, rst, ctl = (_table(doc, k, where) for k in ("clock", "reset", "control"))
    _known(clk, {"port", "period_ns"}, f"{where} [clock]")
    _known(rst, {"port", "active", "cycles", "every_case"}, f"{where} [reset]")
    _known(ctl, {"start", "done", "busy", "latency", "timeout_cycles", "cycle_counter", "mode"},
           f"{where} [control]")
    consts = _table(doc, "const", where) if isinstance(doc.get("const"), dict) else {
        c.get("port"): c.get("value") for c in doc.get("const", []) if isinstance(c, dict)}
    if not all(isinstance(k, str) and isinstance(v, int) for k, v in consts.items()):
        raise ConfigError(f"{where}: each [[const]] needs a port name and an integer value")
    pm = PortMap(
        path=p, unit=doc["unit"], top=doc["top"], sources=[(p.parent / s).resolve() for s in srcs],
        parameters=dict(params), clock=_typed(clk, "port", str, f"{where} [clock]"),
        period_ns=float(_typed(clk, "period_ns", (int, float), f"{where} [clock]", 10)),
        reset=_typed(rst, "port", str, f"{where} [reset]"),
        reset_active=_typed(rst, "active", int, f"{where} [reset]", 1),
        reset_cycles=_typed(rst, "cycles", int, f"{where} [reset]", 2),
        start=_typed(ctl, "start", str, f"{where} [control]"),
        done=_typed(ctl, "done", str, f"{where} [control]"),
        busy=_typed(ctl, "busy", str, f"{where} [control]"),
        latency=_typed(ctl, "latency", int, f"{where} [control]", 0),
        timeout_cycles=_typed(ctl, "timeout_cycles", int, f"{where} [control]", 1_000_000),
        cycle_counter=_typed(ctl, "cycle_counter", str, f"{where} [control]"),
        mode=_typed(ctl, "mode", str, f"{where} [control]", "case"),
        inputs=[_binding(t, "in", i, where) for i, t in enumerate(_list(doc, "in", where))],
        outputs=[_binding(t, "out", i, where) for i, t in enumerate(_list(doc, "out", where))],
        consts=consts, active_low=list(low), limits=dict(limits),
        reset_every_case=bool(_typed(rst, "every_case", bool, f"{where} [reset]", False)))
    _check(pm, where)
    return pm


def _list(doc: dict[str, Any], key: str, where: str) -> list[Any]:
    v = doc.get(key, [])
    if not isinstance(v, list):
        raise ConfigError(f"{where}: use [[{key}]] (an array of tables)")
    return v


def _check(pm: PortMap, where: str) -> None:
    if pm.mode not in MODES:
        raise ConfigError(f"{where}: control.mode {pm.mode!r} is not one of {', '.join(MODES)}")
    if pm.reset_active not in (0, 1):
        raise ConfigError(f"{where}: reset.active must be 0 or 1")
    if pm.period_ns <= 0 or pm.latency < 0 or pm.timeout_cycles < 1:
        raise ConfigError(f"{where}: period_ns and timeout_cycles must be positive, latency >= 0")
    if (pm.start or pm.done or pm.busy or pm.reset or pm.latency) and not pm.clock:
        raise ConfigError(f"{where}: a start/done/busy/reset/latency protocol needs [clock] port")
    clocked = [b for b in pm.inputs + pm.outputs if b.kind != "port"]
    if clocked and not pm.clock:
        raise ConfigError(f"{where}: memory and stream bindings need [clock] port")
    if pm.mode == "elementwise" and clocked:
        raise ConfigError(f"{where}: elementwise mode takes kind = \"port\" bindings only")
    if not pm.outputs:
        raise ConfigError(f"{where}: no [[out]] binding: nothing would be checked")
    seen: set[str] = set()
    for b in pm.inputs + pm.outputs:
        if b.field in seen:
            raise ConfigError(f"{where}: field {b.field!r} is bound twice")
        seen.add(b.field)
    for s in pm.sources:
        if not s.is_file():
            raise ConfigError(f"{where}: RTL source {str(s)!r} not found")
