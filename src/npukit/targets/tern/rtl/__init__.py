"""Reference SystemVerilog of the ternfpga units, written for npukit from its unit models, each with the
port map ``npukit cosim`` uses (``npukit cosim VECTORS --shipped tern``)."""

from __future__ import annotations

from pathlib import Path

UNITS = {"unpack": "tern_unpack5", "engine": "tern_gemv", "attention": "tern_attention",
         "ffn_glue": "tern_ffn_glue"}


def port_maps() -> dict[str, Path]:
    """unit → its port map file (next to the RTL)."""
    here = Path(__file__).parent
    return {unit: here / f"{top}.toml" for unit, top in UNITS.items()}
