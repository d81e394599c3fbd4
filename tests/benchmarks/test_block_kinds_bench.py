"""benchmarks/block_kinds.py: its diagnostic build decodes the tokens the plain build does, and its
per-kind row times fit inside the block calls they were measured in."""

import numpy as np
import pytest


@pytest.mark.slow
@pytest.mark.hf
def test_diagnostic_build_decodes_as_the_plain_one(tmp_path, load_benchmark, capsys):
    from npukit.api.models import Model
    from npukit.cli.cmd_generate import resolve_model
    from npukit.runtime import backends
    from npukit.runtime.generate import long_lived_frozen

    load_benchmark("gemma3n_cli").save_model(256, 5, 2048, tmp_path)
    kinds = load_benchmark("block_kinds")
    got = kinds.measure(str(tmp_path), steps=3, warm=2, serial=True)
    with long_lived_frozen():
        plain = backends.create_backend(Model(resolve_model(str(tmp_path))).loaded, "pccx", kv="fp16")
        plain.drv.timing = False
        plain.reset()
        want = [int(np.argmax(plain.prefill(kinds.PROMPT)))]
        for _ in range(5):
            want.append(int(np.argmax(plain.step(want[-1]))))
    assert got["tokens"] == want
    names = {k[0] for k in got["kinds"]}
    assert "REDUCE_SUM" in names and any(n.startswith("INT4 GEMV") for n in names)
    assert 0 < sum(k[1] for k in got["kinds"]) <= got["in_block_ms"] <= got["step_ms"]
    kinds.main([str(tmp_path), "--steps", "2", "--warm", "1"])
    out = capsys.readouterr()
    assert "µs/row" in out.out and "measured" in out.out and "CPU " in out.out
