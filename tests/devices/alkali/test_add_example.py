"""The seed's ADD example rebuilt from npukit's sources, run on the device through the document's flow:
exact mode gives what LiteRT's reference kernels compute, alkali mode what the board's VTA delegate
arithmetic computes (an independent emulation of refs §1.7 below)."""

import importlib.util
import math

import numpy as np

from npukit.devices.alkali.spec import StatusId

from .conftest import EXAMPLES, make_rig

FIRMWARE = EXAMPLES / "add_vta.v1.o"


def _make_example():
    spec = importlib.util.spec_from_file_location("make_example", EXAMPLES / "add" / "make_example.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _litert_add(model: bytes, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    from ai_edge_litert import interpreter as litert

    it = litert.Interpreter(model_content=model,
                            experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    ins = it.get_input_details()
    it.set_tensor(ins[0]["index"], a)
    it.set_tensor(ins[1]["index"], b)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]).ravel()


def _vta_quant(scale: float) -> tuple[int, int]:
    """computeQuantizationParameters (vta-delegate.cpp): 16-bit multiplier and exponent."""
    if scale < 1e-6:
        return 0, 0
    q, e = math.frexp(scale)
    m = round(q * (1 << 15))
    if m == 1 << 15:
        m, e = m // 2, e + 1
    return (0, 0) if e < -15 else (m, e)


def _i16(v: int) -> int:
    return (v + (1 << 15)) % (1 << 16) - (1 << 15)


def _simulate_real(x: int, offset: int, mult: int, shift: int) -> int:
    """simulateRealValue: int16 arithmetic, left shift 7, rounding by nudge then floor shift."""
    v = _i16(_i16(offset + x) * 128)
    p = v * mult
    p = (p + ((1 << 14) if p >= 0 else 1 - (1 << 14))) >> 15
    return _i16(p) >> (-shift)


def board_add(x1, zp1, s1, x2, zp2, s2, zp_out, s_out) -> list[int]:
    twice = 2 * max(s1, s2)
    m1, e1 = _vta_quant(s1 / twice)
    m2, e2 = _vta_quant(s2 / twice)
    mo, eo = _vta_quant(twice / ((1 << 7) * s_out))
    out = []
    for a, b in zip(x1, x2, strict=True):
        acc = _simulate_real(a, -zp1, m1, e1) + _simulate_real(b, -zp2, m2, e2)  # ALU ADD
        acc = (acc * mo) >> (15 - eo)  # ALU MUL, SHR
        out.append(max(min(acc + zp_out, 127), -128))  # ALU ADD offset, MIN, MAX
    return out


def _run(tmp_path, delegate: str) -> tuple[bytes, object]:
    rig = make_rig(tmp_path, accelerators=1, delegate=delegate)
    try:
        data = (EXAMPLES / "add" / "input.bin").read_bytes()
        flow = rig.host.run(FIRMWARE.read_bytes(), data=data)
        return flow.output, flow
    finally:
        rig.host.close()
        rig.dev.wait_idle(30)
        rig.thread.stop()
        rig.sub.close()


def test_committed_example_is_what_the_script_writes(tmp_path):
    _make_example().main(tmp_path)
    for name in ("model.tflite", "input-vector.bin", "input.bin"):
        assert (tmp_path / name).read_bytes() == (EXAMPLES / "add" / name).read_bytes(), name


def test_add_exact_mode_equals_litert(tmp_path):
    model = (EXAMPLES / "add" / "model.tflite").read_bytes()
    vec = np.frombuffer((EXAMPLES / "add" / "input-vector.bin").read_bytes(), np.int8)
    expected = _litert_add(model, vec[:4].reshape(1, 4), vec[4:].reshape(1, 4))
    output, flow = _run(tmp_path, "exact")
    assert np.frombuffer(output, np.int8).tolist() == expected.tolist()
    assert expected.tolist() == [-11, -7, -13, -13]  # as documented in refs §0
    assert flow.status.status == StatusId.DONE and flow.status.output_bytes == 4
    assert flow.status.vta_cycles > 0  # the ADD ran on the VTA model
    # the firmware compares with the reference's expected-output.bin, the raw int8 sum: a mismatch
    assert flow.status.r0 == 0 and any("differs" in e.text for e in flow.log)


def test_add_alkali_mode_equals_the_board_arithmetic(tmp_path):
    q = _make_example().QUANT
    vec = np.frombuffer((EXAMPLES / "add" / "input-vector.bin").read_bytes(), np.int8).tolist()
    f32 = [float(np.float32(q[k][0])) for k in ("in0", "in1", "out")]
    # the op's operands are [input_0, input_1] = the vector's second half, then its first half
    expected = board_add(vec[4:], q["in0"][1], f32[0], vec[:4], q["in1"][1], f32[1], q["out"][1], f32[2])
    assert expected == [-12, -7, -14, -13]
    output, _ = _run(tmp_path, "alkali")
    assert np.frombuffer(output, np.int8).tolist() == expected
    raw_sum = [a + b for a, b in zip(vec[:4], vec[4:], strict=True)]
    assert raw_sum == [7, 12, 4, 5]  # what the reference's expected-output.bin holds
