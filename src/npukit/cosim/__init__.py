"""RTL co-simulation: golden vectors from ``npukit vectors`` drive a design under Verilator and cocotb
through a port map (`portmap`), one build per design and one simulator run over all cases (`run`),
with the cocotb side in `bench`. docs/cosim.md is the user's guide."""
