"""``npukit demo vta``: the project-trained digits classifier (``assets/digits-int8``) on the simulated
VTA through the exact delegate: predictions for the shipped samples, checked against the host
reference, the per-layer VTA programs with their cycles, and a Perfetto trace of the modules."""

from __future__ import annotations

import argparse
import time

from npukit.cli import ui

SUMMARY = "digits MLP on the simulated VTA (exact delegate): predictions, cycles per layer, module trace"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", default="vta-digits-trace.json",
                   help="Perfetto trace of the VTA programs (load/compute/store timelines)")
    p.add_argument("--hw", default="vta-alkali", help="VTA hardware preset")


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from npukit.models.tflite import Interpreter, read_model
    from npukit.models.tflite.digits import asset_dir, load_metrics
    from npukit.targets.vta.delegate import make_delegate

    t0 = time.perf_counter()
    with ui.step("lowering the digits model to VTA programs"):
        model = read_model(asset_dir() / "digits_int8.tflite")
        samples = np.load(asset_dir() / "samples.npz")
        images, labels = samples["images"], samples["labels"]
        delegate = make_delegate("exact", hw=args.hw)
        vta = Interpreter(model, delegate=delegate)
        host = Interpreter(model)
    hw = delegate.hw
    print(f"VTA {hw.name}: {hw.derived['gemm_core']} GEMM core, {hw.timing.clock_mhz:g} MHz "
          f"({hw.timing.tier}), buffers inp/wgt/acc {hw.inp_depth}/{hw.wgt_depth}/{hw.acc_depth} elements")
    metrics = load_metrics()
    print(f"model: {metrics['model']} (held-out int8 accuracy {metrics['int8_accuracy']:.2%})")
    print(f"delegated to VTA: {vta.delegated_ops} of {len(model.ops)} ops "
          f"({', '.join(sorted({r.name for r in delegate.reports}))}); host: the rest\n")
    rows, agree = [], 0
    for img, label in zip(images, labels, strict=True):  # (fast: a few ms each)
        x = img[None]
        y = next(iter(vta.run([x]).values()))
        ref = next(iter(host.run([x]).values()))
        same = bool(np.array_equal(y, ref))
        agree += same
        rows.append([int(label), int(y.argmax()), "yes" if same else "NO"])
    ui.table(rows, ["label", "VTA prediction", "= host reference"])
    correct = sum(r[0] == r[1] for r in rows)
    print(f"\n{correct}/{len(rows)} correct; VTA output bit-identical to the reference on "
          f"{agree}/{len(rows)}\n")
    ui.table([[r.index, r.name, r.instructions, f"{r.timing.cycles:.0f}",
               f"{r.ledger['gemm_macs'].value:.0f}", f"{r.ledger['gemm_utilisation'].value:.1f}"]
              for r in delegate.reports], ["op", "kind", "insns", "cycles", "MACs", "util %"])
    fig = vta.plan.figures
    print(f"\nper inference: {fig['vta_cycles'].value:.0f} VTA cycles = {fig['vta_time'].value:.2f} us "
          f"({fig['vta_cycles'].tier}), {fig['vta_dram_bytes'].value:.0f} DRAM bytes, "
          f"{fig['vta_energy'].value:.3f} uJ ({fig['vta_energy'].tier})")
    if args.trace:
        delegate.write_trace(args.trace)
        print(f"trace written to {args.trace} (open in ui.perfetto.dev)")
    print(f"(demo took {time.perf_counter() - t0:.1f} s)")
    return 0 if agree == len(rows) else 1
