"""One example per ``--help``: the command line shown under each (sub)command's options.

Kept in one table (rather than in each cmd_*.py) so the vocabulary reads the same everywhere;
a command that sets its own ``epilog`` keeps it. tests/cli/test_help_examples.py parses every
example with the real parser and fails for a command without one.
"""

from __future__ import annotations

import argparse

EXAMPLES: dict[str, str] = {
    "": "npukit generate --prompt-ids 2,651 --max-new-tokens 8 --target pccx",
    "alkali": "npukit alkali identify --connect tcp://127.0.0.1:4420",
    "alkali identify": "npukit alkali identify --connect tcp://127.0.0.1:4420 --json",
    "alkali enable": "npukit alkali enable --connect tcp://127.0.0.1:4420",
    "alkali disable": "npukit alkali disable --connect tcp://127.0.0.1:4420",
    "alkali load-fw": "npukit alkali load-fw --fw examples/alkali/add_vta.v1.o --fw-id 0",
    "alkali status": "npukit alkali status --connect tcp://127.0.0.1:4420 --json",
    "alkali log": "npukit alkali log --connect tcp://127.0.0.1:4420",
    "alkali run": "npukit alkali run --connect tcp://127.0.0.1:4420 --fw examples/alkali/add_vta.v1.o "
                  "--model examples/alkali/add/model.tflite --input examples/alkali/add/input-vector.bin "
                  "-o y.bin --json",
    "asm": "npukit asm examples/pccx/softmax.s -o softmax.hex --format hex",
    "bpf": "npukit bpf disasm examples/alkali/filter.v3.o",
    "bpf asm": "npukit bpf asm prog.s -o prog.bin",
    "bpf disasm": "npukit bpf disasm examples/alkali/filter.v3.o --json",
    "bpf verify": "npukit bpf verify examples/alkali/checksum.v2.o --abi ubpf --json",
    "bpf run": "npukit bpf run examples/alkali/checksum.v2.o --input examples/alkali/checksum.c "
               "--output-size 8 --json",
    "cosim": "npukit cosim tern_vectors --shipped tern",
    "demo": "npukit demo --list",
    "doctor": "npukit doctor --json",
    "disasm": "npukit disasm softmax.hex",
    "examples": "npukit examples examples",
    "formats": "npukit formats --size 1024",
    "fp8": "npukit fp8 gemm --m 16 --n 512 --k 512 --check",
    "fp8 gemm": "npukit fp8 gemm --m 16 --n 512 --k 512 --check",
    "fp8 bench": "npukit fp8 bench --quick",
    "fp8 harness": "npukit fp8 harness --quick",
    "fp8 gpu": "npukit fp8 gpu --json",
    "fp8 models": "npukit fp8 models --json",
    "eval": "npukit eval model.gguf --text /usr/share/common-licenses/GPL-3 --target quant --kv int8",
    "generate": "npukit generate --prompt \"import os\" --max-new-tokens 40 --target pccx --trace out.json",
    "hw": "npukit hw pccx-v002-kv260 --set gemv.cores_log2=3",
    "nvme": "npukit nvme serve --namespace disk.img --size 64M",
    "nvme serve": "npukit nvme serve --namespace disk.img --size 64M --listen tcp://127.0.0.1:4420",
    "nvme discover": "npukit nvme discover --connect tcp://127.0.0.1:8009",
    "nvme id-ctrl": "npukit nvme id-ctrl --connect tcp://127.0.0.1:4420 --json",
    "nvme list-ns": "npukit nvme list-ns --connect tcp://127.0.0.1:4420",
    "nvme smart-log": "npukit nvme smart-log --connect tcp://127.0.0.1:4420 --json",
    "nvme id-ns": "npukit nvme id-ns --connect tcp://127.0.0.1:4420 -n 1",
    "nvme get-log": "npukit nvme get-log --connect tcp://127.0.0.1:4420 -i 2 -l 512",
    "nvme read": "npukit nvme read --connect tcp://127.0.0.1:4420 -s 0 -c 7 -d out.bin",
    "nvme write": "npukit nvme write --connect tcp://127.0.0.1:4420 -s 0 -c 7 -d in.bin",
    "nvme flush": "npukit nvme flush --connect tcp://127.0.0.1:4420",
    "nvme admin-passthru": "npukit nvme admin-passthru -o 0x06 -l 4096 -r --json",
    "nvme io-passthru": "npukit nvme io-passthru --connect tcp://127.0.0.1:4420 -o 0x00 -n 1",
    "nvme fw-download": "npukit nvme fw-download --connect tcp://127.0.0.1:4420 -f fw.bin",
    "nvme fw-commit": "npukit nvme fw-commit --connect tcp://127.0.0.1:4420 -s 1 -a 1",
    "perf": "npukit perf --hw pccx-v002-kv260 --model gemma3n-e4b --weights int4 --kv int4 --context 8192",
    "shard": "npukit shard run minilm --text \"Three NPU cores share one encoder.\"",
    "shard compile": "npukit shard compile smolvlm-siglip-base-512 -o plan.json",
    "shard run": "npukit shard run minilm --text \"Three NPU cores share one encoder.\" --json",
    "sim": "npukit sim softmax.hex --hw pccx-v002-kv260 --l2-image examples/pccx/softmax_x.bin@0 "
           "--dump L2:0x40+2",
    "sweep": "npukit sweep --hw pccx-v002-kv260 --model gemma3n-e4b --grid kv=int4,int8 "
             "--grid clock_mhz=100:400:16 -o sweep.csv --pareto pareto.png",
    "tflite": "npukit tflite info zoo:digits",
    "tflite info": "npukit tflite info zoo:digits --json",
    "tflite run": "npukit tflite run zoo:digits --input image=x.npy --target vta -o y.npz",
    "vectors": "npukit vectors examples/pccx/gemv_scales.s --out-dir gemv_vectors "
               "--ddr-image examples/pccx/gemv_w.bin@0x10000000 --l2-image examples/pccx/gemv_x.bin@0",
}


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every sub-command parser under ``parser``, by its path ("bpf disasm"), aliases once."""
    out: dict[str, argparse.ArgumentParser] = {}

    def walk(p: argparse.ArgumentParser, path: str) -> None:
        out[path] = p
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                seen: set[int] = set()
                for name, child in action.choices.items():
                    if id(child) not in seen:
                        seen.add(id(child))
                        walk(child, f"{path} {name}".strip())

    walk(parser, "")
    return out


def attach(parser: argparse.ArgumentParser) -> None:
    """Put each command's example under its --help (raw, so it stays one copyable line)."""
    for path, p in subparsers(parser).items():
        example = EXAMPLES.get(path)
        if example and not p.epilog:
            p.epilog = f"example:\n  {example}"
            if p.formatter_class is argparse.HelpFormatter:
                p.formatter_class = argparse.RawDescriptionHelpFormatter
