"""The passes on the real MiniLM graph and the SigLIP-base shapes: placement errors, tiles, shards."""

from __future__ import annotations

import itertools

import pytest

from npukit.models.encoder import preset_config
from npukit.targets.rk3588.compile import CompileOptions, PlacementError, compile_graph
from npukit.targets.rk3588.graph import build_graph
from npukit.targets.rk3588.tasks import tasks, totals, weights_moved, working_set


@pytest.fixture(scope="module")
def minilm_graph(minilm):
    return build_graph(minilm, 64)


def test_without_tiling_the_compile_fails_readably(minilm_graph, hw):
    with pytest.raises(PlacementError) as exc:
        compile_graph(minilm_graph, hw, CompileOptions(tiling=False, sandwich=False))
    msg = str(exc.value)
    assert "layer0." in msg and "B" in msg and "limit" in msg and "enable tiling" in msg
    # the numbers in the message are the working set and the hardware's limit
    ws = exc.value.ws
    assert ws.scratch_bytes > hw.scratchpad or ws.cbuf_banks > hw.banks
    assert f"{hw.scratchpad:,}" in msg or f"{hw.banks} banks" in msg


def test_without_barriers_the_vendor_fuser_undoes_the_tiles(minilm_graph, hw):
    with pytest.raises(PlacementError, match=r"vendor optimizer.*insert fusion barriers"):
        compile_graph(minilm_graph, hw, CompileOptions(barriers=False, sandwich=False))


def test_every_tile_fits_and_sizes_are_chosen(minilm_graph, hw):
    plan = compile_graph(minilm_graph, hw, CompileOptions(sandwich=False))
    sizes = set()
    for n in plan.graph.nodes:
        if n.op == "barrier":
            continue
        ws = working_set(n, plan.graph, hw, n.tiling)
        assert ws.scratch_bytes <= hw.scratchpad and ws.cbuf_banks <= hw.banks and ws.k_pass <= hw.k_per_pass
        sizes.update(v for k, v in n.tiling.items() if k != "order")
    assert sizes - {32}, "tile sizes must follow the shapes, not a fixed 32"
    assert any(n.op == "barrier" for n in plan.graph.nodes)


def test_closed_form_totals_equal_the_task_list(hw):
    cfg = preset_config("smolvlm-siglip-base-512", layers=1, image_size=256)
    import numpy as np

    from npukit.models.encoder import Encoder

    h, f = cfg.hidden, cfg.intermediate
    z = np.zeros
    layer = {k: z((h, h)) for k in ("q_w", "k_w", "v_w", "o_w")} | {"fc1_w": z((f, h)), "fc2_w": z((h, f)),
                                                                    "fc1_b": z(f)}
    layer |= {k: z(h) for k in ("q_b", "k_b", "v_b", "o_b", "ln1_g", "ln1_b", "ln2_g", "ln2_b", "fc2_b")}
    enc = Encoder(cfg, {}, [layer], (z(h), z(h)))
    g = build_graph(enc, cfg.seq_len, [(0, 100), (100, cfg.seq_len)])
    plan = compile_graph(g, hw, CompileOptions(sandwich=False))
    for n in plan.graph.nodes:
        ts = list(tasks(n, plan.graph, n.tiling, hw))
        count, moved, macs, vec = totals(n, plan.graph, n.tiling, hw)
        assert count == len(ts), n.name
        assert moved == sum(t.dma_in + t.dma_out for t in ts), n.name
        assert macs == sum(t.macs for t in ts) and vec == sum(t.vec_elems for t in ts), n.name
        assert weights_moved(n, n.tiling) == sum(t.dma_w for t in ts), n.name


def test_shards_respect_the_task_limit(minilm_graph, hw):
    for limit in (20, 64, 10_000):
        plan = compile_graph(minilm_graph, hw, CompileOptions(sandwich=False, task_limit=limit))
        assert all(s.tasks <= limit for s in plan.shards)
        covered = {}
        for s in plan.shards:
            for it in s.items:
                covered.setdefault(it.node, []).append((it.start, it.stop))
        for n in plan.graph.nodes:  # every task of every op is in exactly one submission, in order
            spans = sorted(covered.get(n.name, [(0, 0)]))
            assert spans[0][0] == 0 and spans[-1][1] == totals(n, plan.graph, n.tiling, hw)[0]
            assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    seedlike = compile_graph(minilm_graph, hw, CompileOptions(sandwich=False))
    assert len(seedlike.shards) == 12  # one submission per half layer, as the seed cut SigLIP


def test_siglip_base_shapes_give_the_seeds_24_shards(hw):
    import numpy as np

    from npukit.models.encoder import Encoder

    cfg = preset_config("smolvlm-siglip-base-512")
    h, f = cfg.hidden, cfg.intermediate
    z = np.zeros
    layer = {k: z((h, h)) for k in ("q_w", "k_w", "v_w", "o_w")} | {"fc1_w": z((f, h)), "fc2_w": z((h, f)),
                                                                    "fc1_b": z(f)}
    layer |= {k: z(h) for k in ("q_b", "k_b", "v_b", "o_b", "ln1_g", "ln1_b", "ln2_g", "ln2_b", "fc2_b")}
    enc = Encoder(cfg, {}, [layer] * cfg.layers, (z(h), z(h)))
    g = build_graph(enc, cfg.seq_len)
    with pytest.raises(PlacementError, match=r"largest: .*attention.*25,165,824 B.*scores 12x1024x1024"):
        compile_graph(g, hw, CompileOptions(tiling=False, sandwich=False))  # the seed's "~25 MB"
    plan = compile_graph(g, hw, CompileOptions(sandwich=False))
    assert len(plan.shards) == 24
