"""Decode speed of an installed GGUF LLM: `npukit generate FILE.gguf --target pccx|quant` as a subprocess vs
transformers fp32 eager on the same file, in the same run.

* **CLI**: ``npukit generate FILE --target T --json --ignore-eos --prompt-ids 2,...`` for ``--tokens`` and
  ``2·--tokens`` new tokens; the marginal s/token of the CLI's own decode loop (``decode_s`` difference
  over N tokens), so loading, quantising and compiling cancel;
* **transformers**: ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`` fp32 eager, greedy
  KV-cached ``generate`` of N and 2N tokens, marginal s/token the same way.

Timings are ``measured`` on this host (the CPU is printed); the ratio is ``derived``.
``--repeat R`` runs each side's N- and 2N-token generations R times and takes the marginal of the
fastest of each (on a shared host the load changes between runs); the load average at the end is
printed with the result.
Usage: ``python benchmarks/gguf_llm_cli.py gemma3 [--target pccx] [--tokens 8] [--threads 2] [--repeat 1]
[--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from npukit.models.gguf.installed import installed_gguf
from npukit.sim.cpu import describe as machine_line

PROMPT = [2, 651, 6037, 576, 6081, 603]  # a few ids valid in both vocabularies


def cli_decode_s(path: Path, target: str, tokens: int) -> float:
    argv = [sys.executable, "-m", "npukit", "--quiet", "generate", str(path), "--target", target, "--json",
            "--ignore-eos", "--prompt-ids", ",".join(map(str, PROMPT)), "--max-new-tokens", str(tokens)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout)["stats"]["figures"]["decode_s"]["value"])


def transformers_s(path: Path, tokens: int, threads: int, repeat: int = 1) -> list[tuple[float, float]]:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    ids = torch.tensor([PROMPT])

    def run(n: int) -> float:
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        return time.perf_counter() - t0

    run(2)  # warm-up
    return [(run(tokens), run(2 * tokens)) for _ in range(repeat)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=("gemma3", "smollm2"))
    ap.add_argument("--target", default="pccx")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1,
                    help="run each generation this many times and keep the fastest (a shared, loaded host)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    path = installed_gguf(a.model)
    cli_decode_s(path, a.target, 1)  # warm-up: kernels compiled, caches filled
    clis = [(cli_decode_s(path, a.target, a.tokens), cli_decode_s(path, a.target, 2 * a.tokens))
            for _ in range(a.repeat)]
    hfs = transformers_s(path, a.tokens, a.threads, a.repeat)
    # the fastest N-token and 2N-token runs each (a difference of single runs is as noisy as either)
    cli = (min(c2 for _, c2 in clis) - min(c1 for c1, _ in clis)) / a.tokens
    hf = (min(t2 for _, t2 in hfs) - min(t1 for t1, _ in hfs)) / a.tokens
    res = {"model": a.model, "target": a.target, "tokens": a.tokens, "repeat": a.repeat,
           "cpu": machine_line(),
           "load_average": os.getloadavg()[0], "cli_s_per_token": cli, "transformers_s_per_token": hf,
           "ratio_tok_per_s": hf / cli}
    if a.json:
        print(json.dumps(res))
        return
    print(f"{res['cpu']}; load average {res['load_average']:.1f}")
    print(f"{a.model}: npukit generate --target {a.target} {1 / cli:.2f} tok/s (measured), transformers fp32 "
          f"eager {1 / hf:.2f} tok/s (measured, {a.threads} threads): {hf / cli:.2f}x (derived)")


if __name__ == "__main__":
    main()
