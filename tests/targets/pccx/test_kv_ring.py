"""The KV ring's host write path: the bytes each format stores (the reference's `kv_quantize`, and
`pack_int4` for INT4), at the rows `rows_of` names, and every row announced to a host that caches
what it reads (the fast executor drops the INT4 codes it unpacked from a K block a token rewrote)."""

from __future__ import annotations

import numpy as np
import pytest

from npukit.models.gemma3n import Gemma3nConfig
from npukit.targets.pccx import numerics as nx
from npukit.targets.pccx.fast.fastsim import FastSimulator
from npukit.targets.pccx.kv_ring import KVRing
from npukit.targets.pccx.memory import HostDDR, kv_quantize

SL, FU = "sliding_attention", "full_attention"
CFG = dict(
    model_type="gemma3n_text", vocab_size=64, vocab_size_per_layer_input=64, hidden_size=16,
    hidden_size_per_layer_input=8, intermediate_size=[32, 32], num_hidden_layers=2, num_attention_heads=2,
    num_key_value_heads=2, head_dim=16, laurel_rank=8, num_kv_shared_layers=0, sliding_window=4,
    layer_types=[SL, FU], activation_sparsity_pattern=[0.95, 0], max_position_embeddings=512,
    altup_num_inputs=2, final_logit_softcapping=30.0,
)


def _expected(fmt: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Per head: the row's bytes and its FP32 scale (None for FP16), from the reference's rule."""
    codes, scales = kv_quantize(x, fmt)
    if fmt == "fp16":
        return codes.astype("<f2").view(np.uint8).reshape(len(x), -1), None
    if fmt == "int8":
        return codes.astype(np.int8).view(np.uint8).reshape(len(x), -1), scales
    return nx.pack_int4(codes).reshape(len(x), -1), scales


@pytest.mark.parametrize("fmt", ["fp16", "int8", "int4"])
def test_ring_rows_hold_the_quantized_token_at_every_row_of_its_position(fmt):
    cfg = Gemma3nConfig.from_hf(CFG)
    host = HostDDR()
    ring = KVRing(cfg, fmt, host, 0x1000_0000, max_tokens=10, sink=2)
    rng = np.random.default_rng(3)
    for pos in (0, 5, 13):  # (13: past the window of 4 and the cap of 10: wrapped rows)
        k, v = (nx.bf16(rng.standard_normal((2, ring.dim))).astype(np.float32) for _ in range(2))
        for layer, r in ring.layers.items():
            got = ring.write(layer, pos, k, v)
            rows = ring.rows_of(layer, pos)
            assert got == 2 * len(rows) * 2 * (ring.rb + (0 if fmt == "fp16" else 4))
            for blocks, x in ((r.k, k), (r.v, v)):
                want, scales = _expected(fmt, x)
                for h, b in enumerate(blocks):
                    for row in rows:
                        assert np.array_equal(host.read(b.codes + row * ring.rb, ring.rb), want[h])
                        if scales is not None:
                            assert host.read(b.scales + 4 * row, 4).view("<f4")[0] == scales[h]


def test_ring_write_drops_the_fast_executors_codes_of_the_rows_it_rewrites():
    cfg = Gemma3nConfig.from_hf(CFG)
    sim = FastSimulator(weights="int8")
    ring = KVRing(cfg, "int4", sim.host, 0x1000_0000, max_tokens=10)
    full, sliding = ring.layers[1], ring.layers[0]
    lo_rows = sim.int4_codes(full.k[0].codes, 3, ring.dim, False)  # rows 0..2 of head 0's K block
    block = sim.int4_codes(full.k[1].codes, 10, ring.dim, False)  # all of head 1's K block
    other = sim.int4_codes(sliding.k[0].codes, 8, ring.dim, False)  # another layer's block
    assert lo_rows is not None and block is not None and other is not None
    k = v = nx.bf16(np.random.default_rng(4).standard_normal((2, ring.dim))).astype(np.float32)
    ring.write(1, 5, k, v)  # row 5 of layer 1's blocks
    assert lo_rows.valid and other.valid and not block.valid
    again = sim.int4_codes(full.k[1].codes, 10, ring.dim, False)
    want, _ = _expected("int4", k)
    assert again is not block and np.array_equal(again.codes[5], nx.unpack_int4(want[1:2], ring.dim)[0])


@pytest.mark.parametrize("fmt", ["fp16", "int8", "int4"])
def test_a_stacked_write_stores_and_announces_what_the_per_block_write_does(fmt):
    """`write` through a layer's stacked FP16 view (one conversion, one assignment per ring row) against
    `write` block by block on a second ring (its stacks turned off): every byte of the region, the byte
    count, each announced range."""
    cfg = Gemma3nConfig.from_hf(CFG)
    rng = np.random.default_rng(5)
    seen: dict[str, list] = {"stacked": [], "plain": []}
    rings = {}
    for name in seen:
        host = HostDDR()
        host.touched = lambda a, n, log=seen[name]: log.append((a, n))  # type: ignore[method-assign]
        rings[name] = KVRing(cfg, fmt, host, 0x1000_0000, max_tokens=10, sink=2)
    rings["plain"]._stacks = dict.fromkeys(rings["plain"].layers)  # (None: block by block)
    specials = np.array([0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x8001, 0x4780, 0x477F, 0x3380, 0x0000, 0x8000])
    for pos in (0, 3, 5, 13):
        bits = nx.to_bits(rng.standard_normal((2, 2, rings["plain"].dim)) * 4.0 ** rng.integers(-20, 20))
        if fmt == "fp16":  # (±inf, NaN, BF16 subnormals, FP16 overflow and underflow)
            bits.reshape(-1)[: specials.size] = specials
        for layer in rings["plain"].layers:
            got = rings["stacked"].write(layer, pos, nx.from_bits(bits[0]), nx.from_bits(bits[1]))
            want = rings["plain"].write(layer, pos, nx.from_bits(bits[0]), nx.from_bits(bits[1]))
            assert got == want
    assert seen["stacked"] == seen["plain"] and len(seen["plain"]) > 0
    assert np.array_equal(rings["stacked"]._region, rings["plain"]._region)
    assert (rings["stacked"]._stacks[0] is not None) == (fmt == "fp16")


class _Staged:
    """A `compile.lower.HostStep` as the ring reads it: K and V blocks in host DDR."""

    def __init__(self, layer: int, k_addr: int, v_addr: int, n: int, items: tuple = ()) -> None:
        self.layer, self.k_addr, self.v_addr, self.n, self.items = layer, k_addr, v_addr, n, items


@pytest.mark.parametrize("fmt", ["fp16", "int4"])
@pytest.mark.parametrize("host_kind", ["plain", "tracked"])
def test_storing_staged_blocks_is_writing_the_values_read_back(fmt, host_kind):
    """`store_staged` (K and V staged back to back: one view, one widening, no K/V split on the stacked
    path; or apart; or a chunk's tokens) against `write` of the BF16 values read back from staging on a
    second ring: every byte of the ring's region and each announced range, in order."""
    cfg = Gemma3nConfig.from_hf(CFG)
    rng = np.random.default_rng(7)
    staging, seen, rings = 0x0010_0000, {"staged": [], "written": []}, {}
    for name, log in seen.items():
        host = FastSimulator(weights="int8").host if host_kind == "tracked" else HostDDR()
        host.map(staging, 1 << 16)
        host.touched = lambda a, n, log=log: log.append((a, n))  # type: ignore[method-assign]
        rings[name] = KVRing(cfg, fmt, host, 0x1000_0000, max_tokens=10, sink=2)
    dim, heads = rings["staged"].dim, cfg.num_key_value_heads
    n = heads * dim
    for pos in (0, 3, 5, 13):
        bits = nx.to_bits(rng.standard_normal(4 * n) * 4.0 ** rng.integers(-20, 20))
        for ring in rings.values():
            ring.host.write(staging, bits)
        for layer in rings["staged"].layers:
            steps = (_Staged(layer, staging, staging + 2 * n, n),  # a decode step's blocks
                     _Staged(layer, staging + 4 * n, staging, n),  # apart
                     _Staged(layer, 0, 0, n, ((0, staging, staging + 4 * n), (1, staging + 2 * n, staging))))
            for st in steps:
                rings["staged"].store_staged(st, pos)
                for t, ka, va in st.items or ((0, st.k_addr, st.v_addr),):
                    k, v = (nx.from_bits(rings["written"].host.read(a, 2 * n).view("<u2")).reshape(heads, dim)
                            for a in (ka, va))
                    rings["written"].write(layer, pos + t, k, v)
                assert np.array_equal(rings["staged"]._region, rings["written"]._region)
    assert seen["staged"] == seen["written"] and len(seen["staged"]) > 0
