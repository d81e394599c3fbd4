"""pccx v002 target: its record is `target.TARGET` (hardware, ISA, simulators, compiler, perf, backends)."""
