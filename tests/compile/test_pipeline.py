"""`npukit.compile.pipeline`: stages run in order, every result is kept, types are checked."""

import pytest

from npukit.compile.pipeline import Pipeline, PipelineError, Stage


def _pipe() -> Pipeline:
    return Pipeline([
        Stage("split", str, list, lambda s, ctx: s.split(ctx.get("sep", " "))),
        Stage("count", list, int, lambda xs, ctx: len(xs)),
    ])


def test_runs_stages_in_order_and_keeps_each_result():
    run = _pipe().run("a,b,c", sep=",")
    assert run.value == 3 and run["split"] == ["a", "b", "c"]
    assert list(run.timings()) == ["split", "count"] and all(t >= 0 for t in run.timings().values())
    with pytest.raises(KeyError):
        run["nope"]


def test_mismatched_stages_and_results_are_one_line_errors():
    with pytest.raises(PipelineError, match="takes"):
        Pipeline([Stage("a", str, int, lambda v, c: 1), Stage("b", str, str, lambda v, c: v)])
    with pytest.raises(PipelineError, match="returned str"):
        Pipeline([Stage("a", str, int, lambda v, c: v)]).run("x")
    with pytest.raises(PipelineError, match="got int"):
        _pipe().run(5)
    with pytest.raises(PipelineError, match="repeat"):
        Pipeline([Stage("a", str, str, lambda v, c: v), Stage("a", str, str, lambda v, c: v)])
