"""Run a pccx program: the functional simulator with host DDR / L2 preloaded from ``FILE@ADDR``
images, then the timing model on the executed work (the target's ``simulate`` capability). Kept apart
from `asm` (text in, words out), which the simulators themselves use for instruction labels."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from npukit.errors import ConfigError, NpukitError
from npukit.targets.pccx.asm import as_word_list
from npukit.targets.pccx.sim import Simulator
from npukit.targets.pccx.timing import simulate_works


def split_image_spec(spec: str, what: str) -> tuple[Path, int]:
    """``FILE@ADDR`` (``--ddr-image``/``--l2-image``) -> (an existing file, the address)."""
    if "@" not in spec:
        raise ConfigError(f"{what} {spec!r} is not FILE@ADDR")
    name, addr = spec.rsplit("@", 1)
    try:
        value = int(addr, 0)
    except ValueError:
        raise ConfigError(f"{what} {spec!r}: address {addr!r} is not an integer") from None
    path = Path(name)
    if not path.is_file():
        raise ConfigError(f"{what}: no such file {name!r}")
    return path, value


def simulate_program(words: Any, hw: Any, profile: str = "extended", ddr_image: Sequence[str] = (),
                     l2_image: Sequence[str] = ()) -> dict[str, Any]:
    """Run bit-exactly on the functional simulator (host DDR / L2 preloaded from ``FILE@ADDR`` images),
    then time the executed work on the shared timing core."""
    sim = Simulator(hw, profile)
    for spec in ddr_image:
        path, addr = split_image_spec(spec, "--ddr-image")
        sim.host.write(addr, np.frombuffer(path.read_bytes(), np.uint8))
    for spec in l2_image:
        path, word = split_image_spec(spec, "--l2-image")
        data = path.read_bytes()
        if len(data) % 2:
            raise ConfigError(f"--l2-image {path}: {len(data)} bytes is not a whole number of BF16 values")
        sim.write_l2_bits(word, np.frombuffer(data, "<u2"))
    sim.load_program(as_word_list(words))
    works = sim.run()
    if sim.error is not None:
        raise NpukitError(str(sim.error))
    return {"timing": simulate_works(hw, works), "instructions": len(works)}
