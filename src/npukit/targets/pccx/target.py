"""The pccx v002 target record: what npukit knows how to do with a pccx NPU (see `npukit.registry`)."""

from npukit.registry import Target

TARGET = Target(
    name="pccx",
    summary="pccx v002 NPU (KV260): INT4 GEMV cores + BF16 CVO unit; Gemma 3n compiled and simulated",
    hw="npukit.targets.pccx.hw:PccxHw",
    isa="npukit.targets.pccx.isa:ISA",
    assemble="npukit.targets.pccx.asm:assemble_program",
    disassemble="npukit.targets.pccx.asm:disassemble_program",
    load_program="npukit.targets.pccx.asm:load_program",
    simulate="npukit.targets.pccx.program:simulate_program",
    perf="npukit.targets.pccx.perf:perf_machine",
    backends=("npukit.targets.pccx.backend", "npukit.targets.pccx.backend_quant",
              "npukit.targets.pccx.llm.backend"),
    extra={"cli": "npukit.targets.pccx.asm:add_cli_arguments", "vectors": "npukit.targets.pccx.vectors",
           "decoder_vectors": "npukit.targets.pccx.decoder_vectors",
           "rtl": "npukit.targets.pccx.rtl:port_maps",
           "sim_sweep": "npukit.targets.pccx.sweep:ADAPTER"},
)
