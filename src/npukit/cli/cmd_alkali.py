"""``npukit alkali``: drive an Alkali accelerator device over NVMe/TCP with the vendor commands.

    npukit alkali identify --connect tcp://127.0.0.1:4420 --nqn NQN
    npukit alkali run --connect tcp://127.0.0.1:4420 --nqn NQN --fw fw.o --model m.tflite --input x.bin \\
        --out y.bin
    npukit alkali enable|disable|load-fw|status|log ...

``run`` follows the document's example command flow; the input buffer holds the model followed by
the input bytes (the seed's helper ABI). Errors from the device are one ``npukit: error:`` line.
"""

from __future__ import annotations

import argparse
import struct
from pathlib import Path

from npukit.cli import ui
from npukit.errors import ConfigError

DEFAULT_NQN = "nqn.2026-11.io.npukit:nvme0"


def _int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _common(p: argparse.ArgumentParser, accel: bool = True) -> None:
    p.add_argument("--connect", default="tcp://127.0.0.1:4420", help="target (default tcp://127.0.0.1:4420)")
    p.add_argument("--nqn", default=DEFAULT_NQN, help=f"subsystem NQN (default {DEFAULT_NQN})")
    p.add_argument("--compat", choices=("doc", "reference"), default="doc",
                   help="vendor command fields as the document (default) or the reference firmware")
    p.add_argument("--json", action="store_true", help="print JSON")
    if accel:
        p.add_argument("--accel", type=_int, default=0, help="accelerator ID (default 0)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("alkali", help="Alkali accelerator device: vendor NVMe commands over NVMe/TCP")
    verbs = p.add_subparsers(dest="verb", metavar="VERB", title="verbs")
    p.set_defaults(func=lambda args: (p.print_help(), 0)[1])
    v = verbs.add_parser("identify", help="Accelerator Identify (8 bytes, then the whole structure)")
    _common(v, accel=False)
    v.set_defaults(func=run_identify)
    for name in ("enable", "disable"):
        v = verbs.add_parser(name, help=f"Global Accelerator Control: {name} the accelerator subsystem")
        _common(v, accel=False)
        v.set_defaults(func=run_global)
    v = verbs.add_parser("load-fw", help="Send Firmware to an accelerator slot")
    _common(v)
    v.add_argument("--fw", required=True, help="eBPF firmware (ELF object or uBPF assembler)")
    v.add_argument("--fw-id", type=_int, default=0, help="firmware slot (default 0)")
    v.set_defaults(func=run_load_fw)
    for name, func, helptext in (("status", run_status, "Get Accelerator Status (RAE=1 header, then RAE=0)"),
                                 ("log", run_log, "accelerator log page C0h (RAE=1 header, then RAE=0)")):
        v = verbs.add_parser(name, help=helptext)
        _common(v)
        v.set_defaults(func=func)
    _register_run(verbs)


def _register_run(verbs: argparse._SubParsersAction) -> None:
    v = verbs.add_parser("run", help="the document's example flow: identify, enable, firmware, data, start, "
                                     "poll, log, output")
    _common(v)
    v.add_argument("--fw", required=True, help="eBPF firmware (ELF object or uBPF assembler)")
    v.add_argument("--fw-id", type=_int, default=0, help="firmware slot (default 0)")
    v.add_argument("--model", help=".tflite model put at the start of the input buffer")
    v.add_argument("--input", help="input bytes (after the model, when --model is given)")
    v.add_argument("-o", "--output", "--out", dest="out", type=ui.output_file("--output"),
                   help="write the output bytes here (--out: the old spelling)")
    v.add_argument("--out-size", type=_int, help="output bytes to read (default: what the status reports)")
    v.add_argument("--storage", type=_int, metavar="SLBA",
                   help="write the input buffer to the namespace at SLBA (NVM Write), then use it with 0x88")
    v.add_argument("--blocks", metavar="SLBA:BYTES",
                   help="use BYTES already on the namespace at SLBA as the input (0x88 only)")
    v.add_argument("--arg", type=_int, action="append", default=[], metavar="U32",
                   help="a 4-byte argument for the firmware's argument list (repeatable)")
    v.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for done/fail")
    v.set_defaults(func=run_run)


def _host(args: argparse.Namespace):
    from npukit.devices.alkali.host import AlkaliHost
    from npukit.devices.alkali.spec import FLAVORS

    return AlkaliHost.connect(args.connect, args.nqn, flavor=FLAVORS[args.compat]())


def _read(path: str, flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: {exc.strerror}") from None


def run_identify(args: argparse.Namespace) -> int:
    from npukit.devices.alkali.spec import Capability

    with _host(args) as h:
        accels = h.identify()
    names = {int(c): c.name.lower() for c in Capability}
    rows = [{"accel": a.accel_id,
             "capabilities": {names.get(c, str(c)): v for c, v in a.capabilities.items()}} for a in accels]
    if args.json:
        ui.emit_json({"accelerators": rows})
    else:
        ui.table([[r["accel"], ", ".join(f"{k}={v}" for k, v in r["capabilities"].items())] for r in rows],
                 ["accel", "capabilities"])
    return 0


def run_global(args: argparse.Namespace) -> int:
    with _host(args) as h:
        (h.enable if args.verb == "enable" else h.disable)()
    _done(args, {"subsystem": args.verb + "d"})
    return 0


def _done(args: argparse.Namespace, obj: dict) -> None:
    if args.json:
        ui.emit_json(obj)
    else:
        print(", ".join(f"{k}: {v}" for k, v in obj.items()))


def run_load_fw(args: argparse.Namespace) -> int:
    image = _read(args.fw, "--fw")
    with _host(args) as h:
        h.send_firmware(args.accel, args.fw_id, image)
    _done(args, {"accel": args.accel, "fw_id": args.fw_id, "bytes": len(image)})
    return 0


def status_json(st) -> dict:
    from npukit.devices.alkali.spec import StatusId, TierCode

    name = StatusId(st.status).name.lower() if st.status in set(StatusId) else str(st.status)
    return {"status": name, "length": st.length, "active_firmware": st.active_firmware, "r0": st.r0,
            "instructions": st.instructions, "input_bytes": st.input_bytes, "output_bytes": st.output_bytes,
            "vta_cycles": {"value": st.vta_cycles, "tier": TierCode(st.vta_tier).name.lower()},
            "host_interpreter_ms": {"value": st.host_ns / 1e6, "tier": "measured"},
            "run_ms": {"value": st.run_ns / 1e6, "tier": "measured"}}


def log_json(entries) -> list[dict]:
    from npukit.devices.alkali.spec import type_name

    return [{"timestamp_us": e.timestamp_us, "type": e.type, "kind": type_name(e.type), "text": e.text}
            for e in entries]


def run_status(args: argparse.Namespace) -> int:
    with _host(args) as h:
        st = status_json(h.status(args.accel))
    if args.json:
        ui.emit_json(st)
    else:
        ui.table([[k, v["value"] if isinstance(v, dict) else v] for k, v in st.items()], ["field", "value"])
    return 0


def run_log(args: argparse.Namespace) -> int:
    with _host(args) as h:
        entries = log_json(h.log(args.accel))
    if args.json:
        ui.emit_json({"entries": entries})
    else:
        print_log(entries)
    return 0


def print_log(entries: list[dict]) -> None:
    ui.table([[e["timestamp_us"], e["kind"], e["text"]] for e in entries], ["timestamp (us)", "type", "text"])


def _input_buffer(args: argparse.Namespace) -> bytes:
    model = _read(args.model, "--model") if args.model else b""
    data = _read(args.input, "--input") if args.input else b""
    return model + data


def run_run(args: argparse.Namespace) -> int:
    firmware = _read(args.fw, "--fw")
    buffer = _input_buffer(args)
    if args.out:
        ui.check_output(args.out, "--output")
    if args.storage is not None and args.blocks:
        raise ConfigError("--storage and --blocks exclude each other")
    storage = None
    if args.blocks:
        slba, _, size = args.blocks.partition(":")
        try:
            storage = (int(slba, 0), int(size, 0))
        except ValueError:
            raise ConfigError(f"--blocks {args.blocks!r}: expected SLBA:BYTES") from None
    with _host(args) as h:
        if args.storage is not None:
            h.write_blocks(args.storage, buffer)
            storage = (args.storage, len(buffer))
        flow = h.run(firmware, accel=args.accel, fw_id=args.fw_id, data=None if storage else buffer,
                     storage=storage, args=[struct.pack("<I", a & 0xFFFFFFFF) for a in args.arg],
                     output_size=args.out_size, timeout=args.timeout)
    if args.out:
        try:
            Path(args.out).write_bytes(flow.output)
        except OSError as exc:
            raise ConfigError(f"cannot write {args.out}: {exc.strerror}") from None
    timeline = [{"t_ms": round(s.t * 1e3, 3), "ms": round(s.seconds * 1e3, 3), "command": s.command,
                 "detail": s.detail} for s in flow.timeline]
    result = {"output": flow.output.hex(), "status": status_json(flow.status), "log": log_json(flow.log),
              "polls": flow.polls, "timeline": timeline}
    if args.json:
        ui.emit_json(result)
        return 0
    print_timeline(result["timeline"])
    print_log(result["log"])
    st = result["status"]
    print(f"status {st['status']}, r0 {st['r0']:#x}, {st['output_bytes']} output bytes, "
          f"VTA {st['vta_cycles']['value']} cycles ({st['vta_cycles']['tier']}), "
          f"host interpreter {st['host_interpreter_ms']['value']:.3f} ms (measured)")
    print(f"output: {flow.output[:64].hex(' ')}{' ...' if len(flow.output) > 64 else ''}")
    return 0


def print_timeline(steps: list[dict]) -> None:
    """Status polls folded into one row (the flow polls until done or fail)."""
    rows, polls = [], 0
    for s in steps:
        if s["command"].startswith("status") and rows and rows[-1][2].startswith("status"):
            polls += 1
            rows[-1] = [rows[-1][0], round(rows[-1][1] + s["ms"], 3), f"status polls x{polls // 2 + 1}",
                        "RAE=1 length, then RAE=0"]
            continue
        polls = 0
        rows.append([s["t_ms"], s["ms"], s["command"], s["detail"]])
    ui.table(rows, ["t (ms)", "ms", "command", "detail"])
