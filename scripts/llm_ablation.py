"""Perplexity of an installed GGUF LLM on a text: golden, the quant target under both weight policies,
and the ablation that keeps one tensor class at 8 bits at a time (docs/models.md, "Quality").

    python scripts/llm_ablation.py gemma3 --text /usr/share/common-licenses/GPL-3 --window 256 \\
        [--runs float,absmax,absmax+embed,...,gguf,gguf-kv:int4] [--json out.json]

A run is ``float``, ``<policy>`` or ``<policy>+<class>[+<class>...]`` (those classes at 8 bits; ``gguf``
(or ``gptq``, the default: the same with the re-quantised matrices GPTQ-calibrated) also keeps its
default, the embedding, at 8 bits, ``gguf-none`` / ``gptq-none`` nothing else), with ``-kv:<fmt>`` for a
KV format other than fp16.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import ClassVar

import numpy as np

from npukit.models.gguf.installed import installed_gguf
from npukit.models.llm.reference import LlmReference
from npukit.models.loading import load_model
from npukit.runtime.llm_eval import mean_nll
from npukit.sim.cpu import host_cpu_model
from npukit.targets.pccx.llm.model import CLASSES, DEFAULT_KEEP_INT8, LlmW4A8, tensor_class

ALL_CLASSES = sorted(set(CLASSES.values()))


class SharedMatrices(LlmW4A8):
    """Runs of one process share the matrices they have in common (quantising Gemma takes minutes)."""

    made: ClassVar[dict[tuple[str, bool, str], tuple[object, float, int]]] = {}

    def matrix(self, name: str):
        key = (name, tensor_class(name) in self.keep_int8, self.policy)
        if key not in self.made:
            got = super().matrix(name)
            err, size = self.errors[tensor_class(name)][-1]
            self.made[key] = (got, err, size)
            return got
        got, err, size = self.made[key]
        if name not in self.matrices:
            self.matrices[name] = got
            self.errors.setdefault(tensor_class(name), []).append((err, size))
        return got


def build(weights, run: str):
    if run.startswith("float"):
        return LlmReference(weights, kv="fp32")
    run, _, kv = run.partition("-kv:")
    policy, *classes = run.split("+")
    keep = set(classes)
    if policy in ("gguf-none", "gptq-none"):
        policy = policy[:4]
    elif policy in ("gguf", "gptq"):
        keep |= set(DEFAULT_KEEP_INT8)
    return SharedMatrices(weights, kv=kv or "fp16", keep_int8=keep, policy=policy)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--window", type=int, default=256)
    ablation = ",".join(f"absmax+{c}" for c in ALL_CLASSES)
    ap.add_argument("--runs", default=f"float,absmax,{ablation},gguf")
    ap.add_argument("--json")
    a = ap.parse_args()
    model = load_model(installed_gguf(a.model))
    ids = np.asarray(model.tokenizer.encode(Path(a.text).read_text()).ids[:a.window], np.int64)
    print(f"{a.model}: {ids.size} tokens of {a.text}; {host_cpu_model()}", flush=True)
    rows = []
    for run in a.runs.split(","):
        t0 = time.perf_counter()
        ref = build(model.weights, run)
        ppl = math.exp(mean_nll(ref, ids))
        row = {"run": run, "perplexity": ppl, "seconds": time.perf_counter() - t0}
        if isinstance(ref, LlmW4A8):
            row["weight_error"] = ref.class_errors()
        rows.append(row)
        print(json.dumps(row), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"model": a.model, "text": a.text, "tokens": int(ids.size),
                                            "cpu": host_cpu_model(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
