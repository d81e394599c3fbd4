"""``npukit eval MODEL.gguf``: a perplexity table with tiers through the CLI; bad input exits 2 with
one line."""

import subprocess
import sys

import pytest

from npukit.models.gguf.installed import installed_gguf


def npukit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "npukit", *args], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_eval_gguf_prints_perplexity_with_evidence() -> None:
    out = npukit("eval", str(installed_gguf("smollm2")), "--text", "/usr/share/common-licenses/GPL-3",
                 "--target", "golden", "--kv", "fp16", "--window", "40")
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith("perplexity"))
    assert float(line.split()[1]) > 1.0
    assert "measured" in line and "golden --kv fp16, first 40 tokens of GPL-3" in line


def test_eval_bad_text_exits_2_with_one_line(tmp_path) -> None:
    out = npukit("eval", str(installed_gguf("smollm2")), "--text", str(tmp_path / "nope.txt"))
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "cannot read" in out.stderr
    assert "Traceback" not in out.stderr
