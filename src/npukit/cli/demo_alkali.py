"""``npukit demo alkali``: the Alkali computational-storage device on loopback, end to end. An int8 CNN
(the project's own digits model) and its committed eBPF firmware go to the device over NVMe/TCP; the
images are written to the namespace and handed to the accelerator as local-storage input; the
firmware runs each image through tflite_vta on the simulated VTA. Prints the command timeline, the
accelerator log and the VTA cycle summary, and writes one Perfetto trace (NVMe commands, eBPF run,
VTA modules)."""

from __future__ import annotations

import argparse
import json
import struct
import tempfile
import time

from npukit.cli import ui

SUMMARY = "Alkali CSD on loopback: int8 CNN via vendor NVMe commands → eBPF firmware → TFLite on VTA"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", type=ui.output_file("--trace"), default="alkali-demo-trace.json",
                   help="Perfetto trace to write (default alkali-demo-trace.json)")
    p.add_argument("--delegate", choices=("exact", "alkali"), default="exact",
                   help="tflite_vta numerics (alkali: the board's delegate, CONV_2D on the host)")


def _data():
    from importlib import resources

    root = resources.files("npukit.devices.alkali") / "data"
    return {name: (root / name).read_bytes() for name in
            ("cnn_model.tflite", "cnn_images.bin", "cnn_classify.v1.o", "cnn_labels.json")}


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from npukit.cli.cmd_alkali import log_json, print_log, print_timeline, status_json
    from npukit.devices.alkali.device import AlkaliDevice
    from npukit.devices.alkali.host import AlkaliHost
    from npukit.devices.alkali.trace import session_trace, write_trace
    from npukit.devices.nvme.client import NvmeTcpHost
    from npukit.devices.nvme.namespace import Namespace
    from npukit.devices.nvme.subsystem import Subsystem
    from npukit.devices.nvme.tcp import TargetThread

    ui.check_output(args.trace, "--trace")
    data = _data()
    model, images = data["cnn_model.tflite"], data["cnn_images.bin"]
    labels = json.loads(data["cnn_labels.json"])["labels"]
    count, slba = len(images) // 64, 2048
    base = time.perf_counter()
    nqn = "nqn.2026-11.io.npukit:alkali-demo"
    with tempfile.TemporaryDirectory() as tmp:
        sub = Subsystem(nqn, [Namespace(f"{tmp}/ns.img", size=16 << 20)])
        device = AlkaliDevice(2, delegate=args.delegate).install(sub)
        target = TargetThread([sub])
        try:
            print(f"device: NVMe/TCP on 127.0.0.1:{target.port}, {nqn}, 2 accelerators, "
                  f"tflite_vta delegate '{args.delegate}'")
            with (ui.step(f"classifying {count} images on the device (eBPF firmware, TFLite on VTA)"),
                  AlkaliHost(NvmeTcpHost("127.0.0.1", target.port, nqn, io_queues=1)) as host):
                buffer = model + images
                host.write_blocks(slba, buffer)
                arglist = [struct.pack("<I", v) for v in (len(model), count, 64, 10)]
                flow = host.run(data["cnn_classify.v1.o"], accel=0, storage=(slba, len(buffer)), args=arglist)
                host_t0 = host._t0
                device.wait_idle(60)
        finally:
            target.stop()
            sub.close()
    print("\ncommand timeline (host side, wall clock, measured):")
    print_timeline([{"t_ms": round(s.t * 1e3, 3), "ms": round(s.seconds * 1e3, 3), "command": s.command,
                     "detail": s.detail} for s in flow.timeline])
    print("\naccelerator 0 log (page C0h):")
    print_log(log_json(flow.log))
    classes = np.frombuffer(flow.output, np.int8).reshape(count, 10).argmax(axis=1).tolist()
    right = sum(c == y for c, y in zip(classes, labels, strict=True))
    print(f"\npredictions {classes}, labels {labels}: {right}/{count}")
    _vta_summary(device, status_json(flow.status))
    path = write_trace(session_trace(flow.timeline, host_t0, device, base), args.trace)
    print(f"\ntrace: {path} (open in ui.perfetto.dev: NVMe commands, eBPF run, VTA modules)")
    return 0


def _vta_summary(device, status: dict) -> None:
    run = device.accels[0].runs[-1].outcome
    calls = [c for c in run.tflite if c.helper == "tflite_vta"]
    print("\nVTA cycle summary:")
    if not calls or not calls[0].timings:
        print("  no op ran on the VTA (the alkali delegate keeps CONV_2D and FULLY_CONNECTED on the host)")
    else:
        rows = [[f"{name}#{index}", timing.cycles, f"{timing.seconds * 1e6:.2f}"]
                for index, name, timing in calls[0].timings]
        ui.table(rows, ["op", "cycles per image", "us per image"])
        fig = calls[0].figures["vta_cycles"]
        print(f"  {len(calls)} images: {status['vta_cycles']['value']} VTA cycles ({fig.tier}; {fig.source})")
    print(f"  host TFLite interpreter {status['host_interpreter_ms']['value']:.1f} ms, firmware run "
          f"{status['run_ms']['value']:.1f} ms, {status['instructions']} eBPF instructions (measured)")
