"""pccx v002 target: hardware description, ISA, functional simulator, timing adapter."""

from npukit.targets.pccx import hw as hw  # registers @hardware("pccx")
