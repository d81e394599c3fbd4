"""Golden vectors of the ternfpga units for RTL tests, recorded from a generation on the ``tern`` backend.

Four units, each a list of cases (one unit call per case) and a field table:

* ``unpack`` — the base-3 decoder: ``bytes`` (u8) → ``codes`` (u2, five per byte, lane 0 first;
  0 → 0, 1 → +1, 2 → −1). Case 0 is all 256 byte values (243..255 alias as the decoder's digit
  arithmetic makes them); the others are the weight bytes of the recorded engine calls.
* ``engine`` — one packed ternary GEMV: ``weights`` (u8 base-3 rows, ``ceil(cols/5)`` bytes a row),
  ``x`` (s8), ``rows``/``cols`` → ``y`` (s32, wrapping).
* ``attention`` — one query head: ``q`` (s16 [D]), ``k``/``v`` (s16 [T, D]), ``shift`` (u6), the
  4096-entry Q15 ``exp_table`` (u16, one shared file), ``t``/``d`` → ``num`` (s48 [D]) and ``sum_e``
  (u32).
* ``ffn_glue`` — one token: ``gate``/``up`` (s32 [F]), ``w_q`` (s16 [F]), ``f`` → ``out`` (s8 [F])
  and ``amax`` = max(max|N|, 1) (u88), the value the unit's one divide uses.

Every case carries ``cycles``: npukit's cycle model of the unit for that call (`units`), which
``npukit cosim`` compares with the cycles the RTL takes. Arrays are ``$readmemh`` files (one element
per line, two's complement at the field's width, row-major); scalars are ``value`` in the manifest.
Recording wraps the backend's operation set, so the recorded outputs are the ones the run used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from npukit.cosim.vectors import FORMAT, Field, readmemh, unit_entry, write_case
from npukit.targets.tern import units
from npukit.targets.tern.engine import decode_base3
from npukit.targets.tern.ops import TernOps

FIELDS: dict[str, dict[str, Field]] = {
    "unpack": {
        "n": Field("in", 16, False, "", "number of bytes"),
        "bytes": Field("in", 8, False, "[n]", "base-3 bytes, five trits each"),
        "codes": Field("out", 2, False, "[n, 5]", "lane codes, lane 0 = least significant digit: "
                       "0 → 0, 1 → +1, 2 → −1"),
    },
    "engine": {
        "rows": Field("in", 16, False, "", "output rows"),
        "cols": Field("in", 16, False, "", "input columns (activations)"),
        "weights": Field("in", 8, False, "[rows, ceil(cols/5)]", "base-3 weight bytes, each row "
                         "starting on a byte boundary"),
        "x": Field("in", 8, True, "[cols]", "int8 activations"),
        "y": Field("out", 32, True, "[rows]", "int32 row sums (two's-complement wrap)"),
    },
    "attention": {
        "t": Field("in", 8, False, "", "cached keys T (1..t_max)"),
        "d": Field("in", 8, False, "", "head dimension D"),
        "shift": Field("in", 6, False, "", "score shift: idx = min((max s − s) >> shift, 4095)"),
        "q": Field("in", 16, True, "[d]", "query"),
        "k": Field("in", 16, True, "[t, d]", "keys, row j = key j"),
        "v": Field("in", 16, True, "[t, d]", "values, row j = value j"),
        "exp_table": Field("in", 16, False, "[4096]", "EXP[i] = clip(round(2^15·exp(−0.01·i)), 0, 32767); "
                           "the same file in every case"),
        "num": Field("out", 48, True, "[d]", "num_d = Σ_j EXP[idx_j]·v_jd"),
        "sum_e": Field("out", 32, False, "", "Σ_j EXP[idx_j]"),
    },
    "ffn_glue": {
        "f": Field("in", 16, False, "", "channels F"),
        "gate": Field("in", 32, True, "[f]", "gate projection (relu(gate) < 2^21)"),
        "up": Field("in", 32, True, "[f]", "up projection (|up| < 2^21)"),
        "w_q": Field("in", 16, True, "[f]", "Q15 norm weight"),
        "out": Field("out", 8, True, "[f]", "h_i = sign(N_i)·min((|N_i|·recip + 2^(R−1)) >> R, 127)"),
        "amax": Field("out", 88, False, "", "max(max_i |N_i|, 1), N_i = relu(g_i)²·u_i·w_i"),
    },
}

CYCLE_MODELS = {
    "unpack": "combinational: no cycle model",
    "engine": "rows × ceil(cols / lanes) tiles at the preset's cycles per tile (one tile per cycle)",
    "attention": "npukit.targets.tern.units.AttentionTiming: (T·D + 2) + (T + 3) + (T·D + 2) + 1",
    "ffn_glue": "npukit.targets.tern.units.FFNGlueTiming: 2·(F + 1 + 8 + 1) + 129 + 1",
}


class RecordingTernOps(TernOps):
    """TernOps that keeps each unit call's operands and results (up to ``limit`` per unit; the export
    picks an evenly spread subset of them)."""

    limit = 4096

    def _keep(self, unit: str, **values: Any) -> None:
        cases = self.__dict__.setdefault("cases", {u: [] for u in FIELDS})
        if len(cases[unit]) < self.limit:
            cases[unit].append({k: np.array(v, copy=True) if isinstance(v, np.ndarray) else v
                                for k, v in values.items()})

    def matvec(self, layer: int, lin: Any, q: np.ndarray) -> np.ndarray:
        y = super().matvec(layer, lin, q)
        W = self._packed[id(lin)]
        tiles = W.out_features * self.engine.tiles_per_row(W.in_features)
        for t in range(y.shape[0]):
            self._keep("engine", label=f"L{layer}.{lin.name}.t{t}", weights=W.rows, x=q[t], y=y[t],
                       rows=W.out_features, cols=W.in_features,
                       cycles=int(np.ceil(tiles * self.hw.engine.cycles_per_tile)))
        return y

    def attention(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  shift: int) -> tuple[np.ndarray, np.ndarray]:
        num, sum_e = super().attention(layer, q, k, v, shift)
        T, D = k.shape[0], q.shape[1]
        cycles = units.attention_cycles(T, D, self.hw.attention.timing)
        for h in range(q.shape[0]):
            self._keep("attention", label=f"L{layer}.h{h}.T{T}", q=q[h], k=k[:, h], v=v[:, h],
                       num=num[h], sum_e=int(sum_e[h]), shift=int(shift), t=T, d=D, cycles=cycles)
        return num, sum_e

    def ffn_glue(self, layer: int, g: np.ndarray, u: np.ndarray, w_q: np.ndarray) -> np.ndarray:
        out = super().ffn_glue(layer, g, u, w_q)
        timing = self.hw.ffn_glue.timing
        for t in range(g.shape[0]):
            # the unit's divisor is not part of the backend's result: the unit function returns it
            _, amax, _ = units.ffn_glue_unit(g[t], u[t], w_q)
            self._keep("ffn_glue", label=f"L{layer}.t{t}", gate=g[t], up=u[t], w_q=w_q, out=out[t],
                       amax=int(amax), f=int(g.shape[1]), cycles=units.ffn_glue_cycles(g.shape[1], timing))
        return out


def unpack_cases(engine_cases: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """All 256 byte values, then the weight bytes of the first engine calls (distinct matrices)."""
    sources = [("all 256 byte values", np.arange(256, dtype=np.uint8))]
    seen: set[str] = set()
    for c in engine_cases:
        name = c["label"].rsplit(".t", 1)[0]
        if name not in seen:
            seen.add(name)
            sources.append((f"{name} weights", np.asarray(c["weights"], np.uint8).reshape(-1)))
    cases = []
    for label, b in sources[:limit]:
        codes = decode_base3(b[:, None], 5)  # per byte: five digits, lane 0 first
        cases.append({"label": label, "bytes": b, "codes": codes, "n": int(b.size), "cycles": None})
    return cases


def spread(cases: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """At most ``n`` cases evenly spread over the run, first and last included (later calls see
    longer contexts, the first ones the prompt)."""
    if len(cases) <= n:
        return list(cases)
    picks = np.unique(np.rint(np.linspace(0, len(cases) - 1, n)).astype(int))
    return [cases[i] for i in picks]


def export(cases: dict[str, list[dict[str, Any]]], out: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """Write every unit's cases (``<unit>/<NNNN>_<field>.hex``) and ``manifest.json``."""
    limit = int(meta.get("cases_per_unit_max", 64))
    cases = {u: spread(c, limit) for u, c in cases.items()}
    cases["unpack"] = unpack_cases(cases.get("engine", []), limit)
    manifest: dict[str, Any] = {
        "format": FORMAT, **meta, "byte_order": "little",
        "hex": "$readmemh, one element per line, two's complement at the field's bits, row-major",
        "units": {}}
    (out / "attention").mkdir(parents=True, exist_ok=True)
    exp_file = "attention/exp_table.hex"
    (out / exp_file).write_text(readmemh(units.exp_table(), 16))
    for unit, fields in FIELDS.items():
        (out / unit).mkdir(parents=True, exist_ok=True)
        shared = {"exp_table": (exp_file, [units.EXP_N])} if unit == "attention" else {}
        rows = [write_case(out, unit, n, c, fields, shared) for n, c in enumerate(cases.get(unit, []))]
        manifest["units"][unit] = unit_entry(fields, CYCLE_MODELS[unit], rows)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
