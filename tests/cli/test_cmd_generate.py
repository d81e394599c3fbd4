"""``npukit generate``: the JSON contract against transformers, streaming, and one-line errors."""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from gemma3n_tiny import TINY, cached_dir, cached_greedy

from npukit.cli.main import main
from npukit.errors import ModelError

pytestmark = pytest.mark.hf  # transformers / safetensors are the oracles

PROMPT = (5, 7, 9, 11, 2, 3, 4, 50, 60, 70)


def _run(capsys, *argv):
    rc = main(["generate", *map(str, argv)])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _copy(tmp_path) -> Path:
    d = tmp_path / "model"
    shutil.copytree(cached_dir(0), d)
    return d


def test_json_logits_match_transformers(capsys):
    toks, logits = cached_greedy(0, PROMPT, 24)
    rc, out, err = _run(capsys, cached_dir(0), "--prompt-ids", ",".join(map(str, PROMPT)),
                        "--max-new-tokens", 24, "--target", "golden", "--ignore-eos", "--json", "--logits")
    assert rc == 0, err
    obj = json.loads(out)
    assert obj["tokens"] == toks and obj["prompt_ids"] == list(PROMPT)
    got = np.array(obj["logits"], dtype=np.float32)
    assert got.shape == (24, TINY["vocab_size"])
    np.testing.assert_allclose(got, logits, atol=1e-4, rtol=0)
    stats = obj["stats"]
    assert stats["generated_tokens"] == 24 and stats["figures"]["wall_s"]["tier"] == "measured"
    assert stats["backend"]["target"] == "golden"


def test_stops_at_eos_unless_ignored(capsys):
    # make the EOS id a token that greedy decoding emits for the first time after a few steps
    toks, _ = cached_greedy(0, PROMPT, 24)
    k = next(i for i in range(2, 24) if toks[i] not in toks[:i])
    d = cached_dir(0)
    cfg = json.loads((d / "config.json").read_text())
    tmp = d.parent / "eos"
    if not tmp.exists():
        shutil.copytree(d, tmp)
        (tmp / "config.json").write_text(json.dumps({**cfg, "eos_token_id": [toks[k], 95]}))
    ids = ",".join(map(str, PROMPT))
    rc, out, _ = _run(capsys, tmp, "--prompt-ids", ids, "--max-new-tokens", 10, "--json")
    assert rc == 0 and json.loads(out)["tokens"] == toks[:k + 1]
    assert json.loads(out)["stats"]["stop_reason"] == "stop_token"


def test_streams_ids_without_tokenizer(capsys):
    toks, _ = cached_greedy(0, PROMPT, 24)
    rc, out, err = _run(capsys, cached_dir(0), "--prompt-ids", ",".join(map(str, PROMPT)),
                        "--max-new-tokens", 5, "--ignore-eos")
    assert rc == 0
    assert out.split() == [str(t) for t in toks[:5]]
    assert "5 tokens" in err and "golden" in err


def test_streams_text_with_tokenizer_and_samples_reproducibly(tmp_path, capsys):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    d = _copy(tmp_path)
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(TINY["vocab_size"])}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.save(str(d / "tokenizer.json"))
    args = [d, "--prompt", "w5 w7 w9 w11", "--max-new-tokens", 6, "--ignore-eos"]
    rc, out, _ = _run(capsys, *args, "--json")
    obj = json.loads(out)
    assert rc == 0 and obj["prompt_ids"] == [5, 7, 9, 11]
    assert obj["text"] == " ".join(f"w{t}" for t in obj["tokens"])
    rc, out, _ = _run(capsys, *args)
    assert rc == 0 and out.strip() == obj["text"]
    sampled = [*args, "--temperature", "1.5", "--top-p", "0.95", "--repetition-penalty", "1.15", "--json"]
    a = json.loads(_run(capsys, *sampled, "--seed", 1)[1])["tokens"]
    b = json.loads(_run(capsys, *sampled, "--seed", 1)[1])["tokens"]
    c = [json.loads(_run(capsys, *sampled, "--seed", s)[1])["tokens"] for s in (2, 3, 4)]
    assert a == b and any(x != a for x in c)


def test_default_model_comes_from_the_embedded_location(monkeypatch, capsys):
    import npukit.models.embedded as emb

    monkeypatch.setattr(emb, "default_model_dir", lambda: cached_dir(0))
    rc, out, _ = _run(capsys, "--prompt-ids", "3,4", "--max-new-tokens", 2, "--json")
    assert rc == 0 and json.loads(out)["model"] == str(cached_dir(0))

    def missing():
        raise ModelError("embedded model incomplete: nothing here")

    monkeypatch.setattr(emb, "default_model_dir", missing)
    rc, out, err = _run(capsys, "--prompt-ids", "3,4", "--max-new-tokens", 2)
    assert rc == 2 and err.startswith("npukit: error: embedded model") and err.count("\n") == 1


def _one_line_error(capsys, *argv, match):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.startswith("npukit: error: ") and err.count("\n") == 1, err
    assert match in err, err


def test_bad_inputs_are_one_line_errors(capsys):
    d = cached_dir(0)
    capsys.readouterr()  # building the cached model may print transformers' save progress
    v = TINY["vocab_size"]
    _one_line_error(capsys, d, "--prompt-ids", f"1,{v}", match=f"token id {v} out of range")
    _one_line_error(capsys, d, "--prompt-ids", "1,-3", match="token id -3 out of range")
    _one_line_error(capsys, d, "--prompt-ids", "1,x", match="comma-separated integers")
    _one_line_error(capsys, d, "--prompt", "hello", match="no tokenizer.json")
    _one_line_error(capsys, d, "--prompt-ids", "1", "--logits", match="--logits needs --json")
    _one_line_error(capsys, d, "--prompt-ids", "1", "--top-p", "0", match="top-p")
    _one_line_error(capsys, "no-such-model", match="no model directory or preset")


def test_bad_model_directories_are_one_line_errors(tmp_path, capsys):
    d = _copy(tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "hidden_activation": "silu"}))
    _one_line_error(capsys, d, "--prompt-ids", "1", match="hidden_activation")
    (d / "config.json").write_text(json.dumps({**cfg, "hidden_size_per_layer_input": 4}))
    _one_line_error(capsys, d, "--prompt-ids", "1", match="config needs")
    (d / "config.json").write_text(json.dumps(cfg))
    st = d / "model.safetensors"
    blob = st.read_bytes()
    st.write_bytes(blob[: len(blob) // 2])
    _one_line_error(capsys, d, "--prompt-ids", "1", match="truncated")
    st.write_bytes(blob[:8] + b"#" + blob[9:])
    _one_line_error(capsys, d, "--prompt-ids", "1", match="invalid JSON")
    st.write_bytes(blob[:3])
    _one_line_error(capsys, d, "--prompt-ids", "1", match="truncated")


class _Exited(Exception):
    pass


def test_the_process_command_ends_without_teardown_after_its_output(capsys, monkeypatch):
    """As the process's own command line (argv None), a successful generate flushes what it printed,
    runs the atexit handlers and ends the process at once (`os._exit`), skipping the interpreter's
    teardown of the model's objects; a caller's argv list, or a failure, returns as before."""
    import atexit
    import os

    from npukit.cli import main as climain

    calls: list[str] = []

    def fake_exit(rc: int) -> None:
        calls.append(f"exit {rc}")
        raise _Exited

    monkeypatch.setattr(os, "_exit", fake_exit)
    monkeypatch.setattr(atexit, "_run_exitfuncs", lambda: calls.append("atexit"))  # (the real ones
    monkeypatch.setattr(climain, "_SKIP_TEARDOWN", [])  # would remove this session's model copies)
    argv = ["generate", str(cached_dir(0)), "--prompt-ids", "5,7", "--max-new-tokens", "2",
            "--target", "golden", "--ignore-eos", "--json"]
    monkeypatch.setattr(sys, "argv", ["npukit", *argv])
    with pytest.raises(_Exited):
        climain.main()
    assert calls == ["atexit", "exit 0"]
    assert len(json.loads(capsys.readouterr().out)["tokens"]) == 2  # the whole JSON object was out
    climain._SKIP_TEARDOWN.clear()
    assert climain.main(argv) == 0 and calls == ["atexit", "exit 0"]  # a caller's list: returns
    climain._SKIP_TEARDOWN.clear()
    monkeypatch.setattr(sys, "argv", ["npukit", *argv[:-1], "--logits"])  # --logits without --json
    assert climain.main() == 2 and calls == ["atexit", "exit 0"]  # a failure: returns its status
