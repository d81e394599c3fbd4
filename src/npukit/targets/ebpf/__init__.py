"""eBPF target: RFC 9669 ISA, uBPF-syntax assembler, ELF loader and a memory-safe VM (Alkali firmware)."""
