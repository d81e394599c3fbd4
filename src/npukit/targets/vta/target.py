"""The VTA target record (TVM's Versatile Tensor Accelerator as the Alkali CSD uses it)."""

from npukit.registry import Target

TARGET = Target(
    name="vta",
    summary="TVM VTA (Alkali CSD): 128-bit ISA, fsim-exact sim, token-queue timing, TFLite delegate",
    hw="npukit.targets.vta.hw:VtaHw",
    isa="npukit.targets.vta.isa:ISA",
    assemble="npukit.targets.vta.isa:assemble",
    disassemble="npukit.targets.vta.isa:disassemble",
    simulate="npukit.targets.vta.program:simulate",
    extra={"cli": "npukit.targets.vta.program:add_cli_arguments",
           "tflite_delegate": "npukit.targets.vta.delegate:make_delegate",
           "sim_sweep": "npukit.targets.vta.sweep:ADAPTER"},
)
