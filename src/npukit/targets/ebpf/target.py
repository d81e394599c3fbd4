"""Registry record of the eBPF target (RFC 9669 VM running Alkali firmware and uBPF programs)."""

from npukit.registry import Target

TARGET = Target(
    name="ebpf",
    summary="eBPF firmware VM: RFC 9669, uBPF text syntax, clang ELF objects, memory-safe, fast path",
    isa="npukit.targets.ebpf.isa:SPEC",
    assemble="npukit.targets.ebpf.api:assemble",
    disassemble="npukit.targets.ebpf.api:disassemble",
    load_program="npukit.targets.ebpf.api:load_program",
    simulate="npukit.targets.ebpf.api:simulate",
    extra={
        "cli": "npukit.targets.ebpf.api:add_arguments",
        "opcode_table": "npukit.targets.ebpf.isa:opcode_table",
        "run_firmware": "npukit.targets.ebpf.api:run_firmware",
        "elf": "npukit.targets.ebpf.elf:load_elf",
    },
)
