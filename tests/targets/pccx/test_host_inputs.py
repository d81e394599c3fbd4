"""The per-token host input rows (`targets/pccx/host_inputs.py`): what `HostInputs.stage` writes into
staging, against each row made by `compile.host_values.eval_recipe` position by position and written with
`HostDDR.write` (the driver's path before the RoPE blocks and staging views), on a host that hands out
views (the fast executor's) and on one that does not; and the logits read back."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "models"))  # gemma3n_tiny
from gemma3n_tiny import MIXED, SL

from npukit.models.gemma3n import Gemma3nConfig, synthetic_weights
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.compile.host_values import eval_recipe
from npukit.targets.pccx.fast.fastsim import FastSimulator
from npukit.targets.pccx.gemma3n_quant import Gemma3nW4A8, Int4Store
from npukit.targets.pccx.host_inputs import ROPE_BLOCK, HostInputs
from npukit.targets.pccx.memory import HostDDR

STAGING = 0x0010_0000
FU = "full_attention"


@pytest.fixture(scope="module")
def model():
    return Gemma3nW4A8(Int4Store(synthetic_weights(Gemma3nConfig.from_hf(MIXED), seed=0)))


def _recipes(model: Gemma3nW4A8) -> list[tuple[int, tuple]]:
    """A decode program's six rows, at word-aligned staging addresses with gaps between them."""
    kinds = [("embed", 0), ("ple", 0), ("rope", SL, 0, 0), ("rope", SL, 1, 0), ("rope", FU, 0, 0),
             ("rope", FU, 1, 0)]
    out, addr = [], STAGING
    for recipe in kinds:
        out.append((addr, recipe))
        addr += 2 * eval_recipe(model, recipe, [0], 0, {}).size + 64
    return out


def _host(kind: str, log: list) -> HostDDR:
    host = FastSimulator(weights="int8").host if kind == "tracked" else HostDDR()
    host.map(STAGING, 1 << 16)
    host.touched = lambda a, n: log.append((a, n))  # type: ignore[method-assign]
    return host


@pytest.mark.parametrize("kind", ["tracked", "plain"])
def test_staged_rows_are_the_recipes_rows_position_by_position(model, kind):
    recipes = _recipes(model)
    log: list = []
    host, want_host = _host(kind, log), _host("plain", [])
    inputs = HostInputs(model, host, model.s)
    rng = np.random.default_rng(2)
    vocab, n = model.cfg.vocab_size, model.cfg.max_position_embeddings
    # a prompt chunk, decode steps across two RoPE blocks, a jump back (a reset), the last position
    calls = [([int(t) for t in rng.integers(0, vocab, 3)], 0)]
    calls += [([int(rng.integers(0, vocab))], p) for p in [*range(3, ROPE_BLOCK + 6), 1, 2, n - 1]]
    for ids, pos in calls:
        rows = recipes if len(ids) == 1 else [(a, (r[0], 2)) if r[0] != "rope" else (a, (*r[:3], 2))
                                              for a, r in recipes]
        log.clear()
        inputs.stage("decode" if len(ids) == 1 else "chunk", rows, ids, pos)
        memo: dict = {}
        for addr, recipe in rows:
            want_host.write(addr, eval_recipe(model, recipe, ids, pos, memo).astype("<u2"))
        assert np.array_equal(host.read(STAGING, 1 << 16), want_host.read(STAGING, 1 << 16)), (ids, pos)
        for addr, recipe in rows if kind == "tracked" else ():  # every row's bytes announced (codes
            # cached over them are dropped; a plain `HostDDR.write` announces nothing)
            size = 2 * eval_recipe(model, recipe, ids, pos, {}).size
            assert any(a <= addr and addr + size <= a + m for a, m in log), (recipe, log)


def test_logits_read_back_are_the_bits_widened(model):
    host = _host("tracked", [])
    bits = nx.to_bits(np.random.default_rng(3).standard_normal(1000) * 1e3)
    bits[:3] = (0x7F80, 0xFFC1, 0x8001)  # inf, a NaN, a subnormal
    host.write(STAGING + 64, bits)
    for h in (host, _host("plain", [])):
        h.write(STAGING + 64, bits)
        got = HostInputs(model, h, model.s).read_floats(STAGING + 64, bits.size)
        assert got.dtype == np.float32 and got.tobytes() == nx.from_bits(bits).tobytes()


@pytest.mark.parametrize("per_layer", [8, 12])  # per-layer rows in whole words (8), padded to 16 (12)
def test_token_rows_of_every_id_are_the_recipes_rows(per_layer):
    """The embedding and per-layer-embedding rows from the 16 rounded values per scale group
    (`HostInputs._token_row`) against `eval_recipe` (widen, scale, round the row) for every token id,
    those past the per-layer table (row 0) included."""
    cfg = Gemma3nConfig.from_hf(dict(MIXED, hidden_size_per_layer_input=per_layer))
    m = Gemma3nW4A8(Int4Store(synthetic_weights(cfg, seed=1)))
    assert m.lay.ple_padded == (per_layer == 12) and cfg.vocab_size_per_layer_input < cfg.vocab_size
    inputs = HostInputs(m, HostDDR(), m.s)
    for token in range(cfg.vocab_size):
        for recipe in (("embed", 0), ("ple", 0)):
            want = eval_recipe(m, recipe, [token], 0, {})
            got = inputs._token_row(recipe[0], token)
            assert got.dtype == np.uint16 and got.tobytes() == want.tobytes(), (recipe, token)


def test_a_program_made_anew_under_a_known_key_gets_its_own_staging(model):
    """Staging views are kept per program key and recipe list: a new list under the same key (its rows
    elsewhere) is written where it says, not through the old views."""
    first = _recipes(model)
    moved = [(addr + 0x4000, recipe) for addr, recipe in first]
    host, want = _host("tracked", []), _host("plain", [])
    inputs = HostInputs(model, host, model.s)
    for pos, recipes in ((5, first), (6, first), (7, moved), (8, moved)):
        inputs.stage("decode", recipes, [3], pos)
        for addr, recipe in recipes:
            want.write(addr, eval_recipe(model, recipe, [3], pos, {}).astype("<u2"))
        assert np.array_equal(host.read(STAGING, 1 << 16), want.read(STAGING, 1 << 16)), pos
