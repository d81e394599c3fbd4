"""Reference SystemVerilog of a pccx unit, written for npukit from its ISA definition, with the port
map ``npukit cosim`` uses (``npukit cosim VECTORS --shipped pccx``)."""

from __future__ import annotations

from pathlib import Path

UNITS = {"decoder": "pccx_decoder"}


def port_maps() -> dict[str, Path]:
    """unit → its port map file (next to the RTL)."""
    here = Path(__file__).parent
    return {unit: here / f"{top}.toml" for unit, top in UNITS.items()}
