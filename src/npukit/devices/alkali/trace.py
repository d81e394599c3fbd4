"""One Perfetto trace of an Alkali session: the host's NVMe commands, the device's vendor commands, each
firmware run on the eBPF VM with its tflite helper calls, and the simulated VTA modules of every
delegated op, on one time axis (wall clock; the VTA programs are placed at the start of the helper call
that ran them and last their simulated time, tier as the VTA preset says)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from npukit.errors import ConfigError

HOST_PID, DEVICE_PID, VTA_PID = 1, 2, 3


def _meta(pid: int, tid: int, process: str, thread: str) -> list[dict[str, Any]]:
    return [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": process}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}}]


def session_trace(host_steps: list, host_t0: float, device, base: float) -> dict[str, Any]:
    """``host_steps`` (`host.Step`, relative to ``host_t0``), ``device`` (`AlkaliDevice`: its command
    events and the accelerators' runs, relative to ``device.t0``); ``base`` is the perf_counter origin."""
    from npukit.sim.trace import to_trace

    def us(t: float) -> float:
        return round(t * 1e6, 3)

    events = _meta(HOST_PID, 1, "NVMe/TCP host (npukit client)", "commands")
    for s in host_steps:
        events.append({"ph": "X", "pid": HOST_PID, "tid": 1, "name": s.command, "cat": "nvme",
                       "ts": us(host_t0 + s.t - base), "dur": us(s.seconds), "args": {"detail": s.detail}})
    dev0 = device.t0 - base
    events += _meta(DEVICE_PID, 1, "Alkali device", "vendor commands")
    for e in device.events:
        events.append({"ph": "X", "pid": DEVICE_PID, "tid": 1, "name": e.name, "cat": e.queue,
                       "ts": us(dev0 + e.start_s), "dur": us(e.seconds),
                       "args": {"opcode": f"{e.opcode:#04x}", "status": e.status, **e.detail}})
    vta_events: list[dict[str, Any]] = []
    for acc in (a for a in device.accels.values() if a.runs):
        run_tid, helper_tid = 10 + 2 * acc.accel_id, 11 + 2 * acc.accel_id
        events += _meta(DEVICE_PID, run_tid, "Alkali device", f"accel {acc.accel_id}: eBPF firmware")[1:]
        events += _meta(DEVICE_PID, helper_tid, "Alkali device", f"accel {acc.accel_id}: tflite helpers")[1:]
        for rec in acc.runs:
            out, t = rec.outcome, dev0 + rec.start_s
            events.append({"ph": "X", "pid": DEVICE_PID, "tid": run_tid,
                           "name": f"firmware {rec.firmware_id}", "cat": "ebpf", "ts": us(t),
                           "dur": us(out.seconds),
                           "args": {"r0": out.r0, "instructions": out.instructions, "ok": out.ok,
                                    "error": out.error, "tier": "measured (wall clock)"}})
            for when, text in out.printed:
                events.append({"ph": "i", "s": "t", "pid": DEVICE_PID, "tid": run_tid, "name": text.strip(),
                               "cat": "print", "ts": us(t + when)})
            for c in out.tflite:
                events.append({"ph": "X", "pid": DEVICE_PID, "tid": helper_tid, "name": c.helper,
                               "cat": "tflite", "ts": us(t + c.start_s), "dur": us(c.host_s),
                               "args": {"vta_cycles": c.vta_cycles, "vta_tier": str(c.vta_tier),
                                        "delegated_ops": c.delegated_ops, "host_ops": c.host_ops}})
                vta_events += _vta(c, us(t + c.start_s), to_trace)
    seen, merged = set(), []
    for ev in events + vta_events:  # one metadata record per process / thread
        key = (ev["pid"], ev.get("tid"), ev["name"]) if ev["ph"] == "M" else None
        if key is None or key not in seen:
            merged.append(ev)
            seen.add(key)
    return {"traceEvents": merged, "displayTimeUnit": "ns"}


def _vta(call, start_us: float, to_trace) -> list[dict[str, Any]]:
    out, offset = [], start_us
    for index, name, timing in call.timings:
        tr = to_trace(timing, process="VTA (simulated modules)", pid=VTA_PID,
                      metadata={"op": index, "name": name})
        for ev in tr["traceEvents"]:
            if "ts" in ev:
                ev = {**ev, "ts": round(ev["ts"] + offset, 6)}
                ev.setdefault("args", {})["op"] = f"{name}#{index}"
            out.append(ev)
        offset += timing.seconds * 1e6
    return out


def write_trace(trace: dict[str, Any], path: str | Path) -> Path:
    out = Path(path)
    try:
        out.write_text(json.dumps(trace, separators=(",", ":")))
    except OSError as exc:
        raise ConfigError(f"cannot write trace {path}: {exc.strerror}") from None
    return out
