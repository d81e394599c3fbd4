"""Golden vectors of pccx programs for RTL tests (``npukit vectors``, ``npukit sim --dump``).

For a program and its inputs (host DDR and L2 images) `export` writes, into one directory: the
``$readmemh`` program, the initial and final L2 / host DDR / constant-cache images, the state deltas
after every N-th instruction (``checkpoints.jsonl``) and a JSON manifest; `export_token` does the same
for each program segment of one compiled model token, with a MEMSET prologue restoring the constant
cache and SFU registers and a check against the driver's own final state. The file format is in
``docs/vectors.md``; the CLI reaches this module through the target record (``extra["vectors"]``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from npukit import hw as hwmod
from npukit.errors import ConfigError
from npukit.isa import text
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.asm import assemble
from npukit.targets.pccx.isa import ELEMS_PER_WORD
from npukit.targets.pccx.memory import DeviceFault
from npukit.targets.pccx.program import split_image_spec
from npukit.targets.pccx.sim import Simulator

# --- running a pccx program with its images ---------------------------------------------------------

def simulator(words: Sequence[int], hw: Any, options: dict[str, Any]) -> Any:
    """A pccx functional simulator loaded with the program and the ``--ddr-image`` / ``--l2-image``
    inputs (the same parsing as ``npukit sim``), not yet run."""
    sim = Simulator(hw, options.get("profile", "extended"))
    for spec in options.get("ddr_image") or ():
        path, addr = split_image_spec(spec, "--ddr-image")
        sim.host.write(addr, np.frombuffer(path.read_bytes(), np.uint8))
    for spec in options.get("l2_image") or ():
        path, word = split_image_spec(spec, "--l2-image")
        data = path.read_bytes()
        if len(data) % 2:
            raise ConfigError(f"--l2-image {path}: {len(data)} bytes is not a whole number of BF16 values")
        sim.write_l2_bits(word, np.frombuffer(data, "<u2"))
    sim.load_program([int(w) for w in words])
    return sim


def run_checked(sim: Any, every: int | None = None) -> Iterator[int]:
    """Step ``sim`` to the end; yield the number of instructions done at each checkpoint."""
    done = 0
    while not sim.halted:
        if sim.step() is None:
            break
        done += 1
        if every and done % every == 0:
            yield done
    if sim.error is not None:
        raise ConfigError(str(sim.error))
    if not every or done % every:
        yield done


def regions(sim: Any) -> list[tuple[int, np.ndarray]]:
    """The host DDR regions (base byte address, bytes) the run has mapped."""
    return list(zip(sim.host._bases, sim.host._bufs, strict=True))


# --- dumps (npukit sim --dump) --------------------------------------------------------------------

def parse_dump(spec: str) -> tuple[str, int, int]:
    """``L2:ADDR+LEN`` (128-bit words) or ``DDR:ADDR+LEN`` (bytes) -> (region, addr, len)."""
    try:
        region, rest = spec.split(":", 1)
        addr, n = rest.split("+", 1)
        out = region.upper(), int(addr, 0), int(n, 0)
    except ValueError:
        raise ConfigError(f"--dump {spec!r} is not L2:ADDR+WORDS or DDR:ADDR+BYTES") from None
    if out[0] not in ("L2", "DDR") or out[1] < 0 or out[2] <= 0:
        raise ConfigError(f"--dump {spec!r}: region L2 or DDR, address >= 0, length > 0")
    return out


def read_dump(sim: Any, region: str, addr: int, n: int) -> bytes:
    if region == "L2":
        if addr + n > sim.l2.shape[0]:
            raise ConfigError(f"--dump L2:{addr:#x}+{n}: L2 has {sim.l2.shape[0]} words")
        return sim.l2[addr: addr + n].astype("<u2").tobytes()
    try:
        return sim.host.read(addr, n).tobytes()
    except DeviceFault as exc:
        raise ConfigError(f"--dump DDR:{addr:#x}+{n}: {exc}") from None


def dump_rows(region: str, addr: int, data: bytes) -> list[list[str]]:
    """Human rows: per L2 word its 8 BF16 values; per 16 host bytes their hex."""
    if region == "DDR":
        return [[f"{addr + i:#010x}", data[i: i + 16].hex(" ")] for i in range(0, len(data), 16)]
    bits = np.frombuffer(data, "<u2").reshape(-1, 8)
    vals = nx.from_bits(bits)
    return [[f"{addr + i:#07x}", " ".join(f"{v:.4g}" for v in vals[i])] for i in range(len(bits))]


# --- npukit vectors ------------------------------------------------------------------------------

def _hex_words(bits: np.ndarray) -> str:
    """$readmemh of L2 words (rows of 8 uint16, element 0 low), @addr before each non-zero run."""
    lines, prev = [], -2
    nz = np.flatnonzero(bits.any(axis=1))
    for w in nz:
        if w != prev + 1:
            lines.append(f"@{w:x}")
        lines.append("".join(f"{int(b):04x}" for b in bits[w][::-1]))
        prev = w
    return "\n".join(lines) + "\n"


def _hex_bytes(data: np.ndarray) -> str:
    return "\n".join(f"{int(b):02x}" for b in data) + "\n"


def _write_memories(sim: Any, d: Path) -> dict[str, Any]:
    d.mkdir(parents=True, exist_ok=True)
    (d / "l2.bin").write_bytes(sim.l2.astype("<u2").tobytes())
    (d / "l2.hex").write_text(_hex_words(sim.l2))
    cc = sim.cc.reshape(-1, 3)
    (d / "cc.hex").write_text("\n".join("".join(f"{int(v):04x}" for v in e[::-1]) for e in cc) + "\n")
    ddr = {}
    for base, buf in regions(sim):
        name = f"ddr_{base:#x}"
        (d / f"{name}.bin").write_bytes(buf.tobytes())
        (d / f"{name}.hex").write_text(_hex_bytes(buf))
        ddr[f"{base:#x}"] = {"bytes": int(buf.size), "bin": f"{d.name}/{name}.bin",
                             "hex": f"{d.name}/{name}.hex"}
    return {"l2": {"bin": f"{d.name}/l2.bin", "hex": f"{d.name}/l2.hex"}, "cc": f"{d.name}/cc.hex",
            "ddr": ddr}


class _Delta:
    """What changed in the machine since the last checkpoint (L2 words, host bytes, cache entries)."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim
        self._snap()

    def _snap(self) -> None:
        self.l2 = self.sim.l2.copy()
        self.cc = self.sim.cc.copy()
        self.ddr = {b: buf.copy() for b, buf in regions(self.sim)}

    def record(self, done: int) -> dict[str, Any]:
        s = self.sim
        words = np.flatnonzero((s.l2 != self.l2).any(axis=1))
        ddr = []
        for base, buf in regions(s):
            old = self.ddr.get(base)
            idx = np.arange(buf.size) if old is None else np.flatnonzero(buf != old)
            ddr += [[f"{base + int(i):#x}", f"{int(buf[i]):02x}"] for i in idx]
        cc = np.argwhere((s.cc != self.cc).any(axis=2))
        out = {"after": done, "pc": int(s.pc), "status": int(s.status), "s_reg": f"{int(s.s_reg):04x}",
               "e_max": f"{int(s.e_max):04x}",
               "l2": [[f"{int(w):#x}", "".join(f"{int(b):04x}" for b in s.l2[w][::-1])] for w in words],
               "ddr": ddr,
               "cc": [[("fmap", "weight")[int(c)], int(e), [int(v) for v in s.cc[c, e]]] for c, e in cc]}
        self._snap()
        return out


def export(words: Sequence[int], hw: Any, label: str, overrides: list[str], options: dict[str, Any],
           out: Path, every: int, sim: Any = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``words`` (on ``sim`` when given: already holding its initial state) and write the vectors."""
    sim = sim if sim is not None else simulator(words, hw, options)
    out.mkdir(parents=True, exist_ok=True)
    text.write_program(out / "program.hex", list(words), 64, "hex")
    init = _write_memories(sim, out / "init")
    delta = _Delta(sim)
    n = 0
    with (out / "checkpoints.jsonl").open("w") as fh:
        for n in run_checked(sim, every):
            fh.write(json.dumps(delta.record(n)) + "\n")
    final = _write_memories(sim, out / "final")
    digest = hashlib.sha256(b"".join(int(w).to_bytes(8, "little") for w in words)).hexdigest()
    manifest = {
        "target": "pccx", "hw": label, "overrides": list(overrides), "description": hwmod.to_dict(hw),
        "profile": options.get("profile", "extended"), "instructions": n, "checkpoint_every": every,
        "program": {"hex": "program.hex", "word_bits": 64, "words": len(words), "sha256_le_words": digest},
        "inputs": {"ddr_image": list(options.get("ddr_image") or []),
                   "l2_image": list(options.get("l2_image") or [])},
        "l2": {"words": int(sim.l2.shape[0]), "word_bits": 16 * ELEMS_PER_WORD, "element": "bf16",
               "elements_per_word": ELEMS_PER_WORD, "address_unit": "128-bit word",
               "hex_layout": "element 0 in bits [15:0]"},
        "ddr": {"address_unit": "byte", "regions": sorted(init["ddr"] | final["ddr"])},
        "constant_cache": {"caches": ["fmap", "weight"], "entries": int(sim.cc.shape[1]),
                           "fields": ["a", "b", "c"], "field_bits": 16, "hex_layout": "a in bits [15:0]"},
        "byte_order": "little",
        "sfu": {"s_reg": "bf16 bits", "e_max": "bf16 bits"},
        "files": {"init": init, "final": final, "checkpoints": "checkpoints.jsonl"},
        "replay": "npukit sim program.hex --l2-image init/l2.bin@0 " + " ".join(
            f"--ddr-image init/ddr_{a}.bin@{a}" for a in init["ddr"]),
    }
    manifest.update(extra or {})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


# --- one compiled model token ------------------------------------------------------------------
# The model is compiled for pccx and run by the driver on the reference simulator: the prompt, then
# the first generated token, which is several program segments with host steps (the KV ring update)
# between them; each segment is captured with the machine state before and after it.

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


def capture(model: Any, prompt: list[int] | None, hw_name: str, overrides: list[str]
            ) -> tuple[Any, list[tuple[list[int], MachineState, MachineState]]]:
    """(hw, [(segment words, state before, state after)]) of the first generated token."""
    from npukit.targets.pccx.backend import Gemma3nPccx  # the compiler + driver: only for tokens

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
    lines = [f"memset cache={name} slot={e} a={a} b={b} c={c}"
             for ci, name in enumerate(("fmap", "weight"))
             for e, (a, b, c) in enumerate(state.cc[ci].tolist()) if a or b or c]
    lines += [f"memset cache=sreg slot=0 a={state.s_reg:#x}", f"memset cache=sreg slot=1 a={state.e_max:#x}"]
    return assemble("\n".join(lines), "extended", hw)


def replay_simulator(words: list[int], state: MachineState, hw: Any) -> Any:
    """A reset simulator holding ``state``'s L2 and host DDR, loaded with ``words``."""
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


def export_token(model: Any, prompt: list[int] | None, hw_name: str, overrides: list[str],
                 segment: str, out: Path, every: int) -> list[dict[str, Any]]:
    """Vectors of the chosen segments (an index or ``"all"``) of ``model``'s first generated token,
    each in ``out/segment_NN/``, every one checked against the driver's final state."""
    hw, segments = capture(model, prompt, hw_name, overrides)
    if segment == "all":
        chosen = list(range(len(segments)))
    else:
        try:
            chosen = [int(segment)]
        except ValueError:
            raise ConfigError(f"--segment must be an index or 'all', got {segment!r}") from None
        if not 0 <= chosen[0] < len(segments):
            raise ConfigError(f"--segment {chosen[0]}: the token has {len(segments)} segments")
    rows = []
    for j in chosen:
        words, before, after = segments[j]
        pro = prologue(before, hw)
        sim = replay_simulator(pro + words, before, hw)
        d = out / f"segment_{j:02d}"
        man = export(pro + words, hw, hw_name, overrides, {"profile": "extended"}, d, every, sim,
                     {"token": {"model": str(model.name), "prompt_ids": prompt or "BOS", "segment": j,
                                "segments": len(segments), "prologue_instructions": len(pro),
                                "checked_against_driver": True}})
        check_final(sim, after, j)
        rows.append({"dir": d.name, "instructions": man["instructions"], "prologue": len(pro),
                     "ddr": ", ".join(man["ddr"]["regions"])})
    return rows
