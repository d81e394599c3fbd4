"""Golden vectors of one compiled model token (``npukit vectors --token``).

The embedded model (or MODEL) is compiled for pccx and run by the driver on the reference simulator:
the prompt, then the first generated token. That token is several program segments with host steps
between them (the KV ring update); each segment is captured with the machine state before and after
it. A segment is exported like an assembled program, with a short prologue of MEMSETs that restores the
constant cache and the SFU registers the earlier segments left (so ``npukit sim`` can start it from
the L2 and host DDR images alone), and the export is checked against the driver's own final state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from npukit.errors import ConfigError


@dataclass
class MachineState:
    l2: np.ndarray
    cc: np.ndarray
    s_reg: int
    e_max: int
    ddr: list[tuple[int, np.ndarray]]

    @staticmethod
    def of(sim: Any) -> MachineState:
        return MachineState(sim.l2.copy(), sim.cc.copy(), int(sim.s_reg), int(sim.e_max),
                            [(b, np.array(buf, copy=True)) for b, buf in zip(sim.host._bases, sim.host._bufs,
                                                                             strict=True)])


def capture(model_spec: str | None, prompt: list[int] | None, hw_name: str, overrides: list[str]
            ) -> tuple[Any, list[tuple[list[int], MachineState, MachineState]]]:
    """(hw, [(segment words, state before, state after)]) of the first generated token."""
    from npukit.cli.cmd_generate import resolve_model
    from npukit.targets.pccx.backend import Gemma3nPccx

    model = resolve_model(model_spec)
    if model.family != "gemma3n":
        raise ConfigError(f"--token compiles Gemma 3n for pccx; {model.name} is {model.family}")
    ids = prompt or [int(model.config.bos_token_id)]
    be = Gemma3nPccx(model, hw=hw_name, overrides=overrides, executor="reference", prefill="decode")
    dev = be.drv.dev
    real_load, real_run = dev.load_program, dev.run
    current: dict[str, list[int]] = {}
    segments: list[tuple[list[int], MachineState, MachineState]] = []

    def load(words: Any, *a: Any, **k: Any) -> Any:
        current["words"] = [int(w) for w in words]
        return real_load(words, *a, **k)

    def run(*a: Any, **k: Any) -> Any:
        if be.drv.position != len(ids):  # only the first generated token's segments
            return real_run(*a, **k)
        before = MachineState.of(dev)
        out = real_run(*a, **k)
        segments.append((current["words"], before, MachineState.of(dev)))
        return out

    dev.load_program, dev.run = load, run
    logits = be.prefill(ids)
    be.step(int(np.argmax(logits)))
    return be.hw, segments


def prologue(state: MachineState, hw: Any) -> list[int]:
    """MEMSETs that put the constant cache and SFU registers of ``state`` into a reset machine."""
    from npukit.targets.pccx.asm import assemble

    lines = [f"memset cache={name} slot={e} a={a} b={b} c={c}"
             for ci, name in enumerate(("fmap", "weight"))
             for e, (a, b, c) in enumerate(state.cc[ci].tolist()) if a or b or c]
    lines += [f"memset cache=sreg slot=0 a={state.s_reg:#x}", f"memset cache=sreg slot=1 a={state.e_max:#x}"]
    return assemble("\n".join(lines), "extended", hw)


def replay_simulator(words: list[int], state: MachineState, hw: Any) -> Any:
    """A reset simulator holding ``state``'s L2 and host DDR, loaded with ``words``."""
    from npukit.targets.pccx.sim import Simulator

    sim = Simulator(hw, "extended")
    sim.l2[:] = state.l2
    for base, buf in state.ddr:
        sim.host.write(base, buf)
    sim.load_program(words)
    return sim


def check_final(sim: Any, after: MachineState, segment: int) -> None:
    same = (np.array_equal(sim.l2, after.l2) and np.array_equal(sim.cc, after.cc)
            and int(sim.s_reg) == after.s_reg and int(sim.e_max) == after.e_max
            and all(np.array_equal(sim.host.read(b, buf.size), buf) for b, buf in after.ddr))
    if not same:
        raise ConfigError(f"segment {segment}: the exported replay does not reach the driver's state")
