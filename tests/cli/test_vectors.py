"""Golden vectors and computed values: the shipped example programs (examples/pccx) run as the README
writes them, `npukit sim --dump` shows the values they compute, and `npukit vectors` exports images that
replay in `npukit sim` to the exported final state, bit for bit.

Oracles independent of the simulator: the host copy must reproduce its input bytes exactly; the GEMV
and the softmax are recomputed in float64 NumPy from the input files (dequantized INT4 × FP32 scale,
exp / sum) and must agree to BF16 precision; `$readmemh` files are parsed here from the Verilog rules
(hex words, ``@addr`` sets the address)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from npukit.cli.main import main

EX = Path(__file__).resolve().parents[2] / "examples" / "pccx"
HOST = 0x1000_0000


def bf16(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, np.uint32) << 16).view(np.float32).astype(np.float64)


def run_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_host_copy_dump_is_the_input(capsys, tmp_path):
    out = tmp_path / "d.bin"
    rc = main(["sim", str(EX / "host_copy.s"), "--ddr-image", f"{EX / 'host_data.bin'}@{HOST:#x}",
               "--dump", f"DDR:{HOST + 64:#x}+64", "--dump-out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "0x10000040  00 01 02 03" in text
    assert out.read_bytes() == (EX / "host_data.bin").read_bytes()[:64]


def test_gemv_with_scales_matches_numpy(capsys):
    res = run_json(capsys, "sim", str(EX / "gemv_scales.s"), "--ddr-image", f"{EX / 'gemv_w.bin'}@{HOST:#x}",
                   "--l2-image", f"{EX / 'gemv_x.bin'}@0", "--dump", "L2:0x100+2")
    y = bf16(np.frombuffer(bytes.fromhex(res["dump"]["L2:0x100+2"]), "<u2"))
    raw = (EX / "gemv_w.bin").read_bytes()
    packed = np.frombuffer(raw[: 16 * 32], np.uint8).reshape(16, 32)
    lo, hi = (packed & 0xF).astype(np.int64), (packed >> 4).astype(np.int64)
    w = np.stack([lo, hi], axis=-1).reshape(16, 64)  # low nibble first (docs/formats.md)
    w = np.where(w >= 8, w - 16, w)
    scales = np.frombuffer(raw[16 * 32: 16 * 32 + 64], "<f4").astype(np.float64)
    x = bf16(np.frombuffer((EX / "gemv_x.bin").read_bytes(), "<u2"))
    # docs/numerics.md rules 2-3: INT8 activations on a power-of-two scale, exact integer sums,
    # float32 scaling, one rounding to BF16 (ml_dtypes: round to nearest even)
    e = int(np.floor(np.log2(np.abs(x).max())))
    q = np.clip(np.rint(x / 2.0 ** (e - 6)), -127, 127).astype(np.int64)
    t = (np.float32(w @ q) * scales.astype(np.float32)) * np.float32(2.0 ** (e - 6))
    want = t.astype(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_allclose(y, scales * (w @ x), rtol=0.1, atol=0.05)  # and near the float product


def test_softmax_matches_numpy(capsys):
    res = run_json(capsys, "sim", str(EX / "softmax.s"), "--l2-image", f"{EX / 'softmax_x.bin'}@0",
                   "--dump", "L2:0x40+2")
    p = bf16(np.frombuffer(bytes.fromhex(res["dump"]["L2:0x40+2"]), "<u2"))
    x = bf16(np.frombuffer((EX / "softmax_x.bin").read_bytes(), "<u2"))
    e = np.exp(x - x.max())
    np.testing.assert_allclose(p, e / e.sum(), rtol=2 ** -6)
    assert p.sum() == pytest.approx(1.0, abs=0.02)


def test_readme_asm_disasm_sim_lines(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["asm", str(EX / "softmax.s"), "-o", "softmax.hex", "--format", "hex"]) == 0
    assert main(["disasm", "softmax.hex"]) == 0
    assert main(["sim", "softmax.hex", "--hw", "pccx-v002-kv260", "--set", "ddr.bandwidth_gbps=12.8",
                 "--l2-image", str(EX / "softmax_x.bin") + "@0", "--trace", "softmax.json",
                 "--dump", "L2:0x40+2"]) == 0
    assert "cvo.exp" in capsys.readouterr().out and Path("softmax.json").stat().st_size > 0


def readmemh(path: Path, width_hex: int) -> dict[int, int]:
    """Verilog $readmemh: whitespace-separated hex words, '@addr' moves the address, '//' comments."""
    mem, addr = {}, 0
    for line in path.read_text().splitlines():
        for tok in line.split("//")[0].split():
            if tok.startswith("@"):
                addr = int(tok[1:], 16)
            else:
                assert len(tok) <= width_hex
                mem[addr] = int(tok, 16)
                addr += 1
    return mem


@pytest.mark.parametrize("every", [1, 2])
def test_vectors_replay_bit_for_bit(tmp_path, capsys, every):
    d = tmp_path / "vec"
    argv = ["vectors", str(EX / "gemv_scales.s"), "-o", str(d), "--every", str(every),
            "--ddr-image", f"{EX / 'gemv_w.bin'}@{HOST:#x}", "--l2-image", f"{EX / 'gemv_x.bin'}@0"]
    assert main(argv) == 0
    capsys.readouterr()
    man = json.loads((d / "manifest.json").read_text())
    assert man["hw"] == "pccx-v002-kv260" and man["byte_order"] == "little" and man["instructions"] == 3
    assert man["l2"]["element"] == "bf16" and man["ddr"]["regions"] == [f"{HOST:#x}"]
    # the program and initial images as an RTL testbench reads them
    words = readmemh(d / "program.hex", 16)
    assert len(words) == 3
    init_bin = np.frombuffer((d / "init/l2.bin").read_bytes(), "<u2").reshape(-1, 8)
    for addr, value in readmemh(d / "init/l2.hex", 32).items():
        assert value == int("".join(f"{int(b):04x}" for b in init_bin[addr][::-1]), 16)
    assert (d / f"init/ddr_{HOST:#x}.bin").read_bytes() == (EX / "gemv_w.bin").read_bytes()
    # replay from the exported images; the dump must equal the exported final state
    l2_words = man["l2"]["words"]
    ddr_bytes = man["files"]["final"]["ddr"][f"{HOST:#x}"]["bytes"]
    res = run_json(capsys, "sim", str(d / "program.hex"), "--l2-image", f"{d / 'init/l2.bin'}@0",
                   "--ddr-image", f"{d / f'init/ddr_{HOST:#x}.bin'}@{HOST:#x}",
                   "--dump", f"L2:0+{l2_words}", "--dump", f"DDR:{HOST:#x}+{ddr_bytes}")
    assert bytes.fromhex(res["dump"][f"L2:0+{l2_words}"]) == (d / "final/l2.bin").read_bytes()
    assert bytes.fromhex(res["dump"][next(k for k in res["dump"] if k.startswith("DDR"))]) == (
        d / f"final/ddr_{HOST:#x}.bin").read_bytes()
    # init + every checkpoint's deltas = the final image
    state = init_bin.copy()
    lines = [json.loads(x) for x in (d / "checkpoints.jsonl").read_text().splitlines()]
    assert [c["after"] for c in lines] == ([1, 2, 3] if every == 1 else [2, 3])
    for c in lines:
        for w, h in c["l2"]:
            v = int(h, 16)
            state[int(w, 16)] = [(v >> (16 * i)) & 0xFFFF for i in range(8)]
    assert state.astype("<u2").tobytes() == (d / "final/l2.bin").read_bytes()


def test_rtl_golden_reader_agrees_with_the_final_images(tmp_path, capsys):
    """examples/rtl/golden.py (what the cocotb skeleton reads) rebuilds each checkpoint's expected state;
    the last one must equal the exported final images, and the host copy's bytes must be its input."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("golden", EX.parent / "rtl" / "golden.py")
    golden = importlib.util.module_from_spec(spec)
    sys.modules["golden"] = golden  # dataclasses look their module up while the class is built
    spec.loader.exec_module(golden)
    d = tmp_path / "vec"
    assert main(["vectors", str(EX / "host_copy.s"), "-o", str(d),
                 "--ddr-image", f"{EX / 'host_data.bin'}@{HOST:#x}"]) == 0
    capsys.readouterr()
    vec = golden.Vectors(d)
    cps = list(vec.checkpoints())
    assert [c.after for c in cps] == [1, 2, 3]
    assert np.array_equal(cps[-1].l2, vec.l2("final"))
    final = vec.ddr("final")[HOST]
    assert np.array_equal(cps[-1].ddr[HOST], final)
    data = (EX / "host_data.bin").read_bytes()
    assert final.tobytes() == data[:64] + data[:64]
    assert cps[1].l2[0x200:0x204].astype("<u2").tobytes() == data[:64]


@pytest.mark.slow
def test_compiled_model_token_replays_bit_for_bit(tmp_path, capsys):
    """The embedded model's first generated token, compiled for pccx: segment 0 exported, replayed by
    `npukit sim` from the exported images (CLI, files only) to the exported final state, which the
    exporter itself checked against the driver's own machine state after the segment."""
    out = tmp_path / "tok"
    assert main(["vectors", "--token", "--segment", "0", "--every", "64", "-o", str(out)]) == 0
    capsys.readouterr()
    d = out / "segment_00"
    man = json.loads((d / "manifest.json").read_text())
    assert man["token"]["checked_against_driver"] and man["token"]["segments"] >= 2
    assert man["instructions"] == man["program"]["words"] > man["token"]["prologue_instructions"]
    init, final = man["files"]["init"]["ddr"], man["files"]["final"]["ddr"]
    argv = ["sim", str(d / "program.hex"), "--l2-image", f"{d / 'init/l2.bin'}@0", "--rows", "0"]
    for base, info in init.items():
        argv += ["--ddr-image", f"{d / info['bin']}@{base}"]
    changed = [b for b in final if (d / final[b]["bin"]).read_bytes() != (d / init[b]["bin"]).read_bytes()]
    assert changed  # the segment writes host memory (its K/V staging)
    argv += ["--dump", f"L2:0+{man['l2']['words']}"]
    argv += [x for b in changed for x in ("--dump", f"DDR:{b}+{final[b]['bytes']}")]
    res = run_json(capsys, *argv)
    assert bytes.fromhex(res["dump"][f"L2:0+{man['l2']['words']}"]) == (d / "final/l2.bin").read_bytes()
    for b in changed:
        got = bytes.fromhex(res["dump"][f"DDR:{b}+{final[b]['bytes']}"])
        assert got == (d / final[b]["bin"]).read_bytes()
    last = json.loads((d / "checkpoints.jsonl").read_text().splitlines()[-1])
    assert last["after"] == man["instructions"] and last["status"] & 0x2  # done, no error
