"""The cocotb side of ``npukit cosim``: drives every case of a plan through the design and writes what
came back. Imported only inside the simulator process (it needs cocotb); `npukit.cosim.run` writes
the plan (port map + cases as integers) and reads the results file.

Timing conventions (docs/cosim.md): inputs change just after a rising edge; outputs, ``ready``,
``valid`` and ``done`` are sampled at the falling edge, when the design has settled. Measured cycles
are the rising edges after the one that samples ``start`` up to the one after which ``done`` (or
``busy`` low) is first seen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cocotb
from cocotb.clock import Clock
from cocotb.handle import ArrayObject
from cocotb.triggers import FallingEdge, RisingEdge, Timer


class MapError(Exception):
    """The port map does not fit the design (a port missing, a value too wide): exit 2, not a mismatch."""


@dataclass
class Port:
    """A top-level port: a packed vector, or an unpacked array of them (``elements`` > 0)."""

    handle: Any
    name: str
    width: int  # bits of the port, or of one element of an unpacked array
    invert: bool = False  # active-low 1-bit control
    elements: int = 0

    def set(self, value: int) -> None:
        self.handle.value = (value ^ int(self.invert)) & ((1 << self.width) - 1)

    def get(self) -> int:
        return _read(self.handle, self.name) ^ int(self.invert)

    def set_all(self, values: list[int]) -> None:
        for i, v in enumerate(values):
            self.handle[i].value = v & ((1 << self.width) - 1)

    def get_all(self, count: int) -> list[int]:
        return [_read(self.handle[i], f"{self.name}[{i}]") for i in range(count)]


def _read(handle: Any, name: str) -> int:
    v = handle.value
    if hasattr(v, "is_resolvable") and not v.is_resolvable:
        raise MapError(f"port {name} reads X/Z")
    return int(v.to_unsigned()) if hasattr(v, "to_unsigned") else int(v)


class Bench:
    def __init__(self, dut: Any, plan: dict[str, Any]) -> None:
        self.dut, self.map, self.fields = dut, plan["map"], plan["fields"]
        self.clk = self.port(self.map["clock"]) if self.map["clock"] else None

    def port(self, name: str) -> Port:
        try:
            h = getattr(self.dut, name)
        except AttributeError:
            raise MapError(f"the design {self.map['top']} has no port {name!r}") from None
        invert = name in self.map["active_low"]
        if isinstance(h, ArrayObject):  # an unpacked array port: element by element
            lo, hi = h.range.left, h.range.right
            return Port(h, name, len(h[lo]), invert, abs(hi - lo) + 1)
        return Port(h, name, len(h), invert)

    async def rise(self, n: int = 1) -> None:
        for _ in range(n):
            await RisingEdge(self.clk.handle)

    async def settle(self) -> None:
        if self.clk:
            await FallingEdge(self.clk.handle)
        else:
            await Timer(1, unit="ns")

    # -- element packing ---------------------------------------------------------------------------
    def elem_bits(self, b: dict[str, Any], port: Port, count: int) -> int:
        bits = b["bits"] or port.width // max(count, 1)
        if bits < 1 or bits * count > port.width:
            raise MapError(f"field {b['field']}: {count} × {bits}-bit elements do not fit port "
                           f"{port.name} ({port.width} bits)")
        return bits

    def pack(self, b: dict[str, Any], port: Port, elems: list[int]) -> int:
        bits = self.elem_bits(b, port, len(elems))
        word = 0
        for k, v in enumerate(elems):
            if not -(1 << (bits - 1)) <= v < 1 << bits:
                raise MapError(f"field {b['field']}: value {v} does not fit {bits} bits of port {port.name}")
            word |= (v & ((1 << bits) - 1)) << (k * bits)
        return word

    def unpack(self, b: dict[str, Any], port: Port, word: int, count: int) -> list[int]:
        bits = self.elem_bits(b, port, count)
        signed = self.fields[b["field"]]["signed"] if b["signed"] is None else b["signed"]
        out = []
        for k in range(count):
            v = (word >> (k * bits)) & ((1 << bits) - 1)
            out.append(v - (1 << bits) if signed and v >> (bits - 1) else v)
        return out

    # -- inputs ------------------------------------------------------------------------------------
    def words(self, b: dict[str, Any], values: list[int], shape: list[int]) -> list[tuple[int, list[int]]]:
        """(address, elements) per port word; each row starts a new word when row_stride is given;
        ``transpose`` sends a 2-D field column by column (its columns are then the rows here)."""
        n = b["per_word"]
        if b["transpose"] and len(shape) == 2:
            r, c = shape
            values = [values[i * c + j] for j in range(c) for i in range(r)]
            shape = [c, r]
        rows = [values] if b["row_stride"] is None or len(shape) < 2 else [
            values[r * shape[-1]:(r + 1) * shape[-1]] for r in range(len(values) // max(shape[-1], 1))]
        out = []
        for r, row in enumerate(rows):
            base = b["addr_offset"] + r * (b["row_stride"] or 0)
            out += [(base + (i // n) * b["addr_step"], row[i:i + n]) for i in range(0, len(row), n)]
        return out

    def hold(self, b: dict[str, Any]) -> None:
        """The binding's ``set`` ports (a bank select, a mode) at their values while it is served."""
        for name, value in b["set"].items():
            self.port(name).set(value)

    async def load_memory(self, b: dict[str, Any], values: list[int], shape: list[int]) -> None:
        we, addr, data = self.port(b["we"]), self.port(b["addr"]), self.port(b["data"])
        self.hold(b)
        for a, elems in self.words(b, values, shape):
            we.set(1)
            addr.set(a)
            data.set(self.pack(b, data, elems))
            await self.rise()
        we.set(0)

    async def drive_stream(self, b: dict[str, Any], values: list[int], shape: list[int]) -> None:
        data, valid = self.port(b["data"]), self.port(b["valid"])
        ready = self.port(b["ready"]) if b["ready"] else None
        last = self.port(b["last"]) if b["last"] else None
        self.hold(b)
        words = self.words(b, values, shape)
        for i, (_, elems) in enumerate(words):
            data.set(self.pack(b, data, elems))
            valid.set(1)
            if last:
                last.set(int(i == len(words) - 1))
            while True:
                await self.settle()
                taken = ready is None or ready.get() == 1
                await self.rise()
                if taken:
                    break
        valid.set(0)
        if last:
            last.set(0)

    # -- outputs -----------------------------------------------------------------------------------
    def read_port(self, b: dict[str, Any], count: int) -> list[int]:
        p = self.port(b["port"])
        if p.elements:
            if p.elements < count:
                raise MapError(f"field {b['field']}: {count} elements, port {p.name} holds {p.elements}")
            return [self.unpack(b, p, w, 1)[0] for w in p.get_all(count)]
        return self.unpack(b, p, p.get(), count)

    async def read_memory(self, b: dict[str, Any], count: int) -> list[int]:
        addr, data = self.port(b["addr"]), self.port(b["data"])
        en = self.port(b["en"]) if b["en"] else None
        n, got = b["per_word"], []
        self.hold(b)
        for w in range(-(-count // n)):
            addr.set(b["addr_offset"] + w * b["addr_step"])
            if en:
                en.set(1)
            await self.rise(b["read_latency"])
            await self.settle()
            got += self.unpack(b, data, data.get(), n)[: count - w * n]
            await self.rise()
        if en:
            en.set(0)
        return got

    async def collect_stream(self, b: dict[str, Any], count: int, sink: list[int]) -> None:
        data, valid = self.port(b["data"]), self.port(b["valid"])
        if b["ready"]:
            self.port(b["ready"]).set(1)
        while len(sink) < count:
            await self.settle()
            if valid.get() == 1:
                sink += self.unpack(b, data, data.get(), b["per_word"])
            await self.rise()
        del sink[count:]

    # -- one case ----------------------------------------------------------------------------------
    async def prepare(self) -> None:
        m = self.map
        for name, value in m["consts"].items():
            self.port(name).set(value)
        for name in (m["start"], *(b["we"] for b in m["inputs"] if b["we"])):
            if name:
                self.port(name).set(0)
        if self.clk:
            period = m["period_ns"]
            cocotb.start_soon(Clock(self.clk.handle, period, unit="ns").start())
        await self.reset()

    async def reset(self) -> None:
        m = self.map
        if m["reset"]:
            rst = self.port(m["reset"])
            rst.set(m["reset_active"])
            await self.rise(m["reset_cycles"])
            rst.set(1 - m["reset_active"])
            await self.rise()

    async def apply_inputs(self, case: dict[str, Any], first: bool) -> None:
        values, shapes = case["values"], case["shapes"]
        for b in self.map["inputs"]:
            v = values[b["field"]]
            if b["kind"] == "port":
                p = self.port(b["port"])
                elems = v if isinstance(v, list) else [v]
                if p.elements:
                    if p.elements < len(elems):
                        raise MapError(f"field {b['field']}: {len(elems)} elements, port {p.name} holds "
                                       f"{p.elements}")
                    p.set_all([self.pack(b, p, [e]) for e in elems])
                else:
                    p.set(self.pack(b, p, elems))
        for b in self.map["inputs"]:
            if b["kind"] == "memory" and (first or not b["once"]):
                await self.load_memory(b, _flat(values[b["field"]]), shapes[b["field"]])

    async def wait_done(self) -> int | None:
        """Rising edges until done (or not busy); None when the design never got there."""
        m = self.map
        flag, want = (m["done"], 1) if m["done"] else (m["busy"], 0)
        p = self.port(flag)
        for n in range(1, m["timeout_cycles"] + 1):
            await self.rise()
            await self.settle()
            if p.get() == want:
                return n
        return None

    async def run_case(self, case: dict[str, Any], first: bool) -> dict[str, Any]:
        m = self.map
        if m["reset_every_case"] and not first:
            await self.reset()
        await self.apply_inputs(case, first)
        expected = {b["field"]: _flat(case["values"][b["field"]]) for b in m["outputs"]}
        sinks: dict[str, list[int]] = {}
        tasks = [cocotb.start_soon(self.collect_stream(b, len(expected[b["field"]]),
                                                       sinks.setdefault(b["field"], [])))
                 for b in m["outputs"] if b["kind"] == "stream"]
        if m["start"]:
            start = self.port(m["start"])
            start.set(1)
            await self.rise()
            start.set(0)
        feeds = [cocotb.start_soon(self.drive_stream(b, _flat(case["values"][b["field"]]),
                                                     case["shapes"][b["field"]]))
                 for b in m["inputs"] if b["kind"] == "stream"]
        cycles: int | None = None
        if m["done"] or m["busy"]:
            cycles = await self.wait_done()
            if cycles is None:
                return _timeout(case, m["done"] or m["busy"], m["timeout_cycles"])
        elif tasks:
            for t in tasks:
                await t
            await self.settle()
        else:
            await self.rise(m["latency"])
            await self.settle()
        for f in feeds:
            await f
        got = {b["field"]: self.read_port(b, len(expected[b["field"]]))
               for b in m["outputs"] if b["kind"] == "port"}
        dut_cycles = self.port(m["cycle_counter"]).get() if m["cycle_counter"] else None
        got.update(sinks)
        for b in m["outputs"]:
            if b["kind"] == "memory":
                await self.rise()
                got[b["field"]] = await self.read_memory(b, len(expected[b["field"]]))
        await self.rise()
        return _compare(case, m["outputs"], got, expected) | {"cycles": cycles, "dut_cycles": dut_cycles}

    async def run_elementwise(self, case: dict[str, Any]) -> dict[str, Any]:
        """One element group per step through kind "port" bindings: combinational (latency 0) or a
        fixed latency in cycles."""
        m, values = self.map, case["values"]
        for b in m["inputs"]:  # scalars (limits, modes) hold for the whole case
            if not case["shapes"][b["field"]]:
                p = self.port(b["port"])
                p.set(self.pack(b, p, [values[b["field"]]]))
        ins = [(b, self.port(b["port"]), _flat(values[b["field"]])) for b in m["inputs"]
               if case["shapes"][b["field"]]]
        if not ins:
            raise MapError("elementwise mode needs at least one array [[in]] binding")
        steps = len(ins[0][2]) // ins[0][0]["per_word"]
        expected = {b["field"]: _flat(values[b["field"]]) for b in m["outputs"]}
        got: dict[str, list[int]] = {b["field"]: [] for b in m["outputs"]}
        for i in range(steps):
            for b, p, v in ins:
                n = b["per_word"]
                p.set(self.pack(b, p, v[i * n:(i + 1) * n]))
            if self.clk:
                await self.rise(m["latency"])
            await self.settle()
            for b in m["outputs"]:
                got[b["field"]] += self.read_port(b, b["per_word"])
            if self.clk:
                await self.rise()
        return _compare(case, m["outputs"], got, expected) | {"cycles": None, "dut_cycles": None}


def _flat(v: int | list[int]) -> list[int]:
    return v if isinstance(v, list) else [v]


def _timeout(case: dict[str, Any], flag: str, limit: int) -> dict[str, Any]:
    first = {"field": flag, "port": flag, "index": 0, "got": f"not seen in {limit} cycles", "expected": 1}
    return {"label": case["label"], "ok": False, "mismatched": 1, "first": first, "cycles": None,
            "dut_cycles": None}


def _compare(case: dict[str, Any], outputs: list[dict[str, Any]], got: dict[str, list[int]],
             expected: dict[str, list[int]]) -> dict[str, Any]:
    first, bad = None, 0
    for b in outputs:
        f = b["field"]
        for i, (g, e) in enumerate(zip(got[f], expected[f], strict=True)):
            if g != e:
                bad += 1
                if first is None:
                    first = {"field": f, "port": b["port"] or b["data"], "index": i, "got": g, "expected": e}
    return {"label": case["label"], "ok": bad == 0, "mismatched": bad, "first": first}


async def run_plan(dut: Any, plan_path: str) -> None:
    """The generated test's body: every case in order, results (or the map error) to the plan's file."""
    plan = json.loads(Path(plan_path).read_text())
    out: dict[str, Any] = {"error": None, "cases": []}
    try:
        bench = Bench(dut, plan)
        await bench.prepare()
        for i, case in enumerate(plan["cases"]):
            if plan["map"]["mode"] == "elementwise":
                out["cases"].append(await bench.run_elementwise(case))
            else:
                out["cases"].append(await bench.run_case(case, first=i == 0))
    except MapError as e:
        out["error"] = str(e)
    except Exception as e:  # reported as one line by the CLI (exit 2), the traceback stays in sim.log
        out["error"] = f"testbench stopped: {type(e).__name__}: {e}"
        raise
    finally:
        Path(plan["results"]).write_text(json.dumps(out))
