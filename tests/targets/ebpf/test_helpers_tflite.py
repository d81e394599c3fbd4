"""The tflite_apu helper runs npukit's TFLite interpreter on a model in the VM's input buffer; LiteRT's
reference kernels (BUILTIN_REF) are the oracle."""

from __future__ import annotations

import numpy as np
import pytest

from npukit.models.tflite import ModelBuilder
from npukit.models.tflite import options as O
from npukit.targets.ebpf import isa
from npukit.targets.ebpf.asm import assemble_bytes
from npukit.targets.ebpf.helpers import IdentityTflite, alkali_helpers
from npukit.targets.ebpf.vm import Machine


def _add_model() -> bytes:
    b = ModelBuilder()
    x = b.tensor("x", (1, 4), np.int8, 0.02394966, 17)
    y = b.tensor("y", (1, 4), np.int8, 0.02529984, -1)
    out = b.tensor("out", (1, 4), np.int8, 0.03020681, -4)
    b.op("ADD", [y, x], [out], O.AddOptions(0))
    return b.build([x, y], [out])


def _firmware(model_size: int, helper: int) -> Machine:
    text = f"mov %r3, 8\nmov %r4, 4\nmov %r5, {model_size}\ncall {helper}\nmov %r0, 0\nexit"
    return Machine(isa.decode(assemble_bytes(text)), alkali_helpers())


def test_tflite_apu_matches_litert_reference() -> None:
    interp_mod = pytest.importorskip("ai_edge_litert.interpreter")
    model = _add_model()
    vectors = np.array([5, 8, 2, 3, 2, 4, 2, 2], np.int8)
    res = _firmware(len(model), 2).run(model + vectors.tobytes(), 4, "alkali")
    ref = interp_mod.Interpreter(
        model_content=model, experimental_op_resolver_type=interp_mod.OpResolverType.BUILTIN_REF
    )
    ref.allocate_tensors()
    ins = ref.get_input_details()
    ref.set_tensor(ins[0]["index"], vectors[:4].reshape(1, 4))
    ref.set_tensor(ins[1]["index"], vectors[4:].reshape(1, 4))
    ref.invoke()
    want = ref.get_tensor(ref.get_output_details()[0]["index"]).tobytes()
    assert res.output == want
    assert res.calls == [("tflite_apu", (0x2_0000_0000, 0x3_0000_0000, 8, 4, len(model)))]


def test_injected_engine_sees_model_and_inputs() -> None:
    double = IdentityTflite()
    m = Machine(
        isa.decode(assemble_bytes("mov %r3, 4\nmov %r4, 4\nmov %r5, 3\ncall 3\nexit")),
        alkali_helpers(tflite=double),
    )
    res = m.run(b"MOD" + bytes([1, 2, 3, 4]), 4, "alkali")
    assert double.calls == [(3, 4, "vta")] and res.output == bytes([1, 2, 3, 4])
