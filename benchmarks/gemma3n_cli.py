"""The user path: `npukit generate --target pccx` as a fresh process per run vs transformers fp32 eager.

A random Gemma 3n (transformers' initialiser) is saved as a Hugging Face directory: hidden
``--hidden`` (1024: 8 heads × 128; 2048: 8 × 256), 2 KV heads, FFN 4 × hidden, ``--layers`` layers
(two of them Gaussian top-k), 2 KV-shared, vocab ``--vocab``. After a warm-up run (a user's second
run: the INT4 image and the compiled programs come from the disk caches; npukit's bytecode written
where missing, as an installed package has it), interleaved ``--repeats``
times, each figure the median:

* **CLI**: ``npukit generate DIR --target pccx --json --ignore-eos`` with default options (timing
  model on, per-token cycles reported), a 4-token prompt, ``--tokens`` and ``2·--tokens`` new
  tokens; marginal s/token = (wall(2N) − wall(N)) / N, so start-up, loading and setup cancel (their
  run-to-run spread does not: hence N = 32 by default);
* **CLI from the start**: (wall(N) − wall(1)) / (N − 1): a 1-token run (prefill only) against the
  N-token one, so the first decode token (its program's plan built) and the early span-bucket
  switches (8, 16, 32) count, as in a check that starts from the prompt;
* **CLI decode loop**: the same difference of the CLI's own ``decode_s`` (its generation loop, sampling
  and the end-of-run work included, process start-up excluded): the steadier figure;
* **CLI CPU**: the CLI and CLI-from-the-start differences of the processes' own CPU time (user +
  system, all threads, ``getrusage(RUSAGE_CHILDREN)``): not a speed figure (two busy threads count
  twice), but what a run itself did, so growth with N outside the loop shows there whatever else
  the machine runs;
* **driver**: ``decode_s`` of the 2N run per decode step (every program switch included);
* **CLI window**: ``decode_s`` of the N-token run per decode step: the window of *CLI from the start*
  (the first decode program and the early switches included) on the process's own clock, so without
  the other processes' start-up, loading and prompt, whose spread between fresh processes swings the
  wall difference by ±10 ms a token on a shared host;
* **transformers**: ``Gemma3nForCausalLM`` fp32 eager, KV-cached decode from the same 4-token
  prompt, marginal s/token: steps N to 2N − 1 of one 2N-token run, each step timed (what
  wall(2N) − wall(N) measures, inside one run, so two runs' spread cannot make it negative: it did,
  −9.9 ms, at hidden 256 on a loaded CI machine), after one untimed 2N-token run (every cache
  length's first call, as the CLI's warm-up run), in its own process started with the environment this
  script was given: nothing this process loads or sets (numba's OpenMP runtime and its wait policy,
  which a torch loaded here would share) reaches it (measured at hidden 1024, the passive wait
  policy npukit used to set for every process made transformers 40% slower);
* **INT4 floor**: the device weight image's bytes over the host memory bandwidth measured here
  (`gemma3n_decode.host_bandwidth`): the least time one token can take streaming its weights;
* **prefill** (``--prefill`` tokens, 0 skips): the CLI's ``prefill_s`` for a prompt of that many
  tokens (GEMM chunks, default options) against one transformers forward pass over the same prompt,
  as prompt tokens/s;
* **switch**: in a fresh process (``--probe-switch``), the wall time and the process's CPU time of
  each decode step that enters a new attention-span bucket (a power of two from 16: the step that
  runs another program than the step before; position 8 was counted too) less the median step
  that built nothing ahead (the largest over the buckets); the steps before a switch that built part
  of its program ahead, and their median excess;
* **setup**: per CLI run, the backend's ``setup_seconds`` and everything outside generation (process
  start, imports, loading, setup: wall − prefill_s − decode_s).

The CPU model, numba's target and each kernel family's path (`npukit.sim.cpu.describe`) head the
output. ``--numba-cpu NAME`` runs every process (the CLI runs, the switch probes) with numba compiling
for CPU class NAME (``NUMBA_CPU_NAME=NAME NUMBA_CPU_FEATURES=+64bit``, as tests/test_cpu_matrix.py
does): that class's kernel paths, run on this host's silicon (its caches and memory, not that CPU's),
which the output says. Timings are ``measured``; ratios ``derived``; compare only figures from the
same run. Usage: ``python benchmarks/gemma3n_cli.py [--hidden 1024] [--layers 6] [--vocab 32768]
[--tokens 32] [--prefill 512] [--repeats 3] [--threads 2] [--numba-cpu NAME] [--json]
[--trace-overhead]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# the environment as the user gave it, before npukit is imported (npukit sets numba's OpenMP policy
# only while its threads start, `npukit.sim.threads`): transformers runs in a child process with
# exactly this, as it would on its own
USER_ENV = dict(os.environ)

from npukit.sim.cpu import INT4_FAMILIES  # noqa: E402
from npukit.sim.cpu import describe as machine_line  # noqa: E402

SL, FU = "sliding_attention", "full_attention"
PROMPT = (2, 651, 7, 9)  # the 4-token prompt of every decode run


def save_model(hidden: int, layers: int, vocab: int, out: Path) -> Any:
    import torch
    from transformers import Gemma3nForCausalLM, Gemma3nTextConfig

    cfg = Gemma3nTextConfig(
        vocab_size=vocab, vocab_size_per_layer_input=vocab, hidden_size=hidden,
        hidden_size_per_layer_input=256, intermediate_size=[4 * hidden] * layers, num_hidden_layers=layers,
        num_attention_heads=8, num_key_value_heads=2, head_dim=hidden // 8, laurel_rank=64,
        num_kv_shared_layers=2, sliding_window=512,
        layer_types=[SL, SL, FU] * (layers // 3) + [SL] * (layers % 3),
        activation_sparsity_pattern=[0.95, 0.95] + [0.0] * (layers - 2), max_position_embeddings=4096)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = Gemma3nForCausalLM(cfg).eval()
    model.save_pretrained(out, safe_serialization=True)
    return model


def prompt_of(n: int, vocab: int) -> list[int]:
    """A prompt of ``n`` token ids: the decode prompt, then ids spread over the vocabulary."""
    return [*PROMPT[:n], *((101 + 7919 * i) % vocab for i in range(max(0, n - len(PROMPT))))]


def child_env() -> dict[str, str]:
    """A CLI process's environment: the user's, with this run's numba settings (`main`)."""
    ours = ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_NUM_THREADS")
    return {**USER_ENV, **{k: os.environ[k] for k in ours if k in os.environ}}


def cli_run(model_dir: Path, tokens: int, prompt: list[int] | None = None,
            trace: Path | None = None) -> tuple[float, dict]:
    ids = ",".join(str(t) for t in (prompt or PROMPT))
    cmd = [sys.executable, "-m", "npukit.cli.main", "generate", str(model_dir), "--target", "pccx",
           "--prompt-ids", ids, "--max-new-tokens", str(tokens), "--ignore-eos", "--json"]
    if trace is not None:
        cmd += ["--trace", str(trace)]
    c0, t0 = children_cpu(), time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=child_env())
    wall, cpu = time.perf_counter() - t0, children_cpu() - c0
    if out.returncode:
        raise RuntimeError(f"npukit generate exited {out.returncode}: "
                           f"{(out.stderr.strip().splitlines() or ['?'])[-1]}")
    got = json.loads(out.stdout)
    got["_cpu_s"] = cpu  # the process's own CPU time (all its threads), beside its wall time
    return wall, got


def children_cpu() -> float:
    """User + system CPU seconds of this process's ended children (what a CLI run itself used,
    whatever else the machine runs: the steadier figure on a shared host)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def figure(out: dict, name: str) -> float:
    return out["stats"]["figures"][name]["value"]


def per_decode_step(out: dict) -> float:
    """A run's ``decode_s`` per decode step (its first token comes from the prompt, not a step)."""
    return figure(out, "decode_s") / max(out["stats"]["generated_tokens"] - 1, 1)


def outside_generation(wall: float, out: dict) -> float:
    """Process start, imports, loading and setup: what a run spends before and after generating."""
    return wall - figure(out, "prefill_s") - figure(out, "decode_s")


class Peer:
    """transformers in a child process started with the user's environment (`USER_ENV`): nothing this
    process imported or set (npukit's threading settings, say) reaches it. It loads the saved
    checkpoint as a user would (fp32, eager attention) and times what it is asked, one JSON line each."""

    def __init__(self, model_dir: Path, threads: int) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--peer", str(model_dir), "--threads",
                                      str(threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=USER_ENV)

    def ask(self, **request: Any) -> float:
        """The wall time of one request: {"decode": N} or {"prefill": [ids]}."""
        return float(self.reply(request)["wall_s"])

    def marginal(self, n: int) -> float:
        """s/token of steps N to 2N − 1 of one 2N-token decode run."""
        steps = self.reply({"decode": 2 * n})["steps_s"]
        return sum(steps[n:]) / n

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the transformers process ended (exit {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait()


def serve_peer(model_dir: str, threads: int) -> int:
    """(The child process of `Peer`.) One JSON request per line: {"decode": N} or {"prefill": [ids]}."""
    import torch
    from transformers import Gemma3nForCausalLM

    torch.set_num_threads(threads)
    model = Gemma3nForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                               attn_implementation="eager").eval()
    for line in sys.stdin:
        req = json.loads(line)
        if "decode" in req:
            steps = hf_decode_steps(model, req["decode"])
            reply = {"wall_s": sum(steps), "steps_s": steps}
        else:
            reply = {"wall_s": hf_prefill_wall(model, req["prefill"])}
        print(json.dumps(reply), flush=True)
    return 0


def hf_decode_steps(model: Any, tokens: int) -> list[float]:
    """The wall time of each of ``tokens`` KV-cached steps from `PROMPT` (the first is the prompt's)."""
    import torch
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    tok = torch.tensor([list(PROMPT)])
    steps = []
    with torch.no_grad():
        for _ in range(tokens):
            t0 = time.perf_counter()
            out = model(input_ids=tok, past_key_values=cache, use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
            steps.append(time.perf_counter() - t0)
    return steps


def hf_prefill_wall(model: Any, ids: list[int]) -> float:
    import torch
    from transformers import DynamicCache

    t0 = time.perf_counter()
    with torch.no_grad():
        model(input_ids=torch.tensor([ids]), past_key_values=DynamicCache(config=model.config),
              use_cache=True)
    return time.perf_counter() - t0


def decode_rounds(peer: Peer, mdir: Path, n: int, repeats: int) -> dict[str, list[float]]:
    """Interleaved rounds (the machine's load hits every peer alike); the order of the two CLI runs
    alternates, since the first process after the transformers runs starts slower."""
    got: dict[str, list[float]] = {k: [] for k in ("cli", "cli_decode", "driver", "cli_window",
                                                     "transformers", "cli_from_start", "setup_s",
                                                     "outside_generation_s", "cli_cpu", "cli_from_start_cpu")}
    for r in range(repeats):
        if r % 2:
            (w2, j2), (w1, j1) = cli_run(mdir, 2 * n), cli_run(mdir, n)
        else:
            (w1, j1), (w2, j2) = cli_run(mdir, n), cli_run(mdir, 2 * n)
        w0, j0 = cli_run(mdir, 1)  # no decode step: the N-token run's first N - 1 steps over it
        got["cli_from_start"].append((w1 - w0) / (n - 1))
        got["cli"].append((w2 - w1) / n)
        got["cli_from_start_cpu"].append((j1["_cpu_s"] - j0["_cpu_s"]) / (n - 1))
        got["cli_cpu"].append((j2["_cpu_s"] - j1["_cpu_s"]) / n)
        got["cli_decode"].append((figure(j2, "decode_s") - figure(j1, "decode_s")) / n)
        got["driver"].append(per_decode_step(j2))
        got["cli_window"].append(per_decode_step(j1))
        got["transformers"].append(peer.marginal(n))
        for w, j in ((w1, j1), (w2, j2)):
            got["setup_s"].append(j["stats"]["backend"]["setup_seconds"])
            got["outside_generation_s"].append(outside_generation(w, j))
    got["_image_bytes"] = [j2["stats"]["backend"]["compile"]["host_ddr"]["weights_bytes"]]
    return got


def prefill_rounds(peer: Peer, mdir: Path, tokens: int, repeats: int, vocab: int) -> dict[str, Any]:
    """The CLI's prefill_s for a ``tokens``-token prompt (one new token) against transformers' forward
    pass over it, as prompt tokens/s (a warm-up CLI run first: its chunk programs are compiled once)."""
    ids = prompt_of(tokens, vocab)
    try:
        cli_run(mdir, 1, ids)
    except RuntimeError as exc:
        return {"error": str(exc)}
    px, hf = [], []
    for _ in range(repeats):
        _, j = cli_run(mdir, 1, ids)
        px.append(tokens / figure(j, "prefill_s"))
        hf.append(tokens / peer.ask(prefill=ids))
    p, h = statistics.median(px), statistics.median(hf)
    return {"prompt_tokens": tokens, "cli_tok_per_s": p, "transformers_tok_per_s": h,
            "cli_vs_transformers": p / h}


def probe_switch(model_dir: str, last: int) -> dict[str, Any]:
    """(Run in a fresh process.) Step walls of the decode steps from the 4-token prompt to position
    ``last``: each switch into a new span bucket less the median of the steps that built nothing of
    a next bucket's program ahead (`PccxDriver._prepare_ahead`); the steps that did, and their median
    excess over the same baseline (the switch's work spread over the tokens before it)."""
    import numpy as np

    from npukit.api.models import Model
    from npukit.cli.cmd_generate import resolve_model
    from npukit.runtime import backends
    from npukit.runtime.generate import long_lived_frozen

    with long_lived_frozen():  # as the CLI runs
        backend = backends.create_backend(Model(resolve_model(model_dir)).loaded, "pccx", kv="fp16")
        dev, built = backend.drv.dev, [0]
        prepare = getattr(dev, "prepare_program", None)
        if prepare is not None:  # count the plan steps each token builds ahead
            def counted(*args: Any, **kw: Any) -> int:
                n = prepare(*args, **kw)
                built[0] += n
                return n
            dev.prepare_program = counted
        backend.reset()
        tok = int(np.argmax(backend.prefill(list(PROMPT))))
        walls: dict[int, float] = {}
        cpus: dict[int, float] = {}  # process CPU time: what the step cost, whatever else runs here
        ahead: set[int] = set()
        switches: list[int] = []  # the steps that ran another program than the step before (a new bucket)
        while backend.drv.position < last:
            pos, t0, c0, built[0] = backend.drv.position, time.perf_counter(), time.process_time(), 0
            program = backend.drv._current
            tok = int(np.argmax(backend.step(tok)))
            walls[pos], cpus[pos] = time.perf_counter() - t0, time.process_time() - c0
            if built[0]:
                ahead.add(pos)
            if backend.drv._current is not program and pos > len(PROMPT):
                switches.append(pos)
    out: dict[str, Any] = {"ahead_steps": len([p for p in ahead if p not in switches])}
    for name, times in (("", walls), ("_cpu", cpus)):
        plain = [w for p, w in times.items() if p not in ahead and p not in switches and p > len(PROMPT)]
        base = statistics.median(plain) if plain else statistics.median(times.values())
        by = {str(p): (times[p] - base) * 1e3 for p in switches}
        extra = [(times[p] - base) * 1e3 for p in ahead if p not in switches]
        out.update({f"switch{name}_ms_by_position": by, f"switch{name}_ms": max(by.values()) if by else None,
                    f"ahead{name}_ms_per_step": statistics.median(extra) if extra else None})
    return out


def switch_run(mdir: Path, last: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--probe-switch", str(mdir), "--tokens", str(last)],
                         check=True, capture_output=True, text=True, env=child_env())
    return json.loads(out.stdout.strip().splitlines()[-1])


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=32768)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prefill", type=int, default=512, help="prompt tokens of the prefill figure (0: skip)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--numba-cpu", metavar="NAME",
                    help="numba target CPU class of every process (a CPU matrix class: haswell, cascadelake)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--trace-overhead", action="store_true",
                    help="also time the whole command with --trace against without (2N tokens)")
    ap.add_argument("--probe-switch", metavar="DIR", help=argparse.SUPPRESS)  # the fresh switch process
    ap.add_argument("--peer", metavar="DIR", help=argparse.SUPPRESS)  # the transformers process
    return ap.parse_args(argv)


def trace_rounds(mdir: Path, n: int, repeats: int) -> float:
    """The whole command's wall with --trace over without (2N tokens), interleaved; the median."""
    ratios = []
    for _ in range(repeats):
        plain, _ = cli_run(mdir, 2 * n)
        with_trace, _ = cli_run(mdir, 2 * n, trace=mdir.parent / "t.json")
        json.loads((mdir.parent / "t.json").read_text())  # valid JSON, or this raises
        ratios.append(with_trace / plain)
    return statistics.median(ratios)


def compile_bytecode() -> None:
    """Write npukit's bytecode (.pyc) where it is missing, as installing a package does: a source
    checkout run with PYTHONDONTWRITEBYTECODE=1 otherwise compiles ~150 modules from source in every
    CLI process (measured on the 2-core Xeon: ~0.25 s of CPU a process, and its spread, in every
    start-up figure). Quietly nothing where the package directory is read-only."""
    import compileall

    import npukit

    compileall.compile_dir(str(Path(npukit.__file__).parent), quiet=2)


def measure(args: argparse.Namespace, mdir: Path) -> dict[str, Any]:
    save_model(args.hidden, args.layers, args.vocab, mdir)
    n = args.tokens
    compile_bytecode()
    cli_run(mdir, 2 * n)  # warm-up: INT4 image and programs cached, as for a user's second run
    peer = Peer(mdir, args.threads)
    try:
        peer.ask(decode=2 * n)  # its warm-up: every cache length's first call, as the CLI's run above
        return measured(args, mdir, peer, n)
    finally:
        peer.close()


def measured(args: argparse.Namespace, mdir: Path, peer: Peer, n: int) -> dict[str, Any]:
    got = decode_rounds(peer, mdir, n, args.repeats)
    image = got.pop("_image_bytes")[0]
    med = {k: statistics.median(v) for k, v in got.items()}
    sys.path.insert(0, str(Path(__file__).parent))
    from gemma3n_decode import host_bandwidth  # the same host-bandwidth probe

    floor = image / host_bandwidth()
    res: dict[str, Any] = {
        "shape": {k: v for k, v in vars(args).items() if k != "probe_switch"},
        "marginal_s_per_token": {k: med[k] for k in ("cli", "cli_decode", "driver", "cli_window",
                                                     "transformers", "cli_from_start")},
        "cli_window_vs_transformers": med["transformers"] / med["cli_window"],
        "cli_from_start_vs_transformers": med["transformers"] / med["cli_from_start"],
        "cli_vs_transformers": med["transformers"] / med["cli"],
        "cli_decode_vs_transformers": med["transformers"] / med["cli_decode"],
        "driver_vs_transformers": med["transformers"] / med["driver"],
        "host_floor_s_per_token": floor,
        "host_floor_note": ("device weight image bytes (every GEMV tile; sparse W_down streams less) / "
                            "host memory bandwidth measured here"),
        "cli_over_floor": med["cli"] / floor, "cli_decode_over_floor": med["cli_decode"] / floor,
        "setup_s": med["setup_s"], "outside_generation_s": med["outside_generation_s"],
        "cli_cpu_s_per_token": {"marginal": med["cli_cpu"], "from_start": med["cli_from_start_cpu"],
                                "note": "the CLI processes' own CPU time (all threads), same differences"},
        "rounds_s_per_token": {k: got[k] for k in ("cli", "cli_decode", "cli_from_start", "cli_window",
                                                   "transformers", "cli_cpu", "cli_from_start_cpu")}}
    probes = [switch_run(mdir, 2 * n + len(PROMPT)) for _ in range(args.repeats)]
    for name in ("", "_cpu"):  # wall time, and the process's CPU time (steadier on a shared machine)
        ms = [p[f"switch{name}_ms"] for p in probes if p[f"switch{name}_ms"] is not None]
        res[f"switch{name}_ms"] = statistics.median(ms) if ms else None
        res[f"switch{name}_ms_by_position"] = probes[-1][f"switch{name}_ms_by_position"]
        per = [p[f"ahead{name}_ms_per_step"] for p in probes if p[f"ahead{name}_ms_per_step"] is not None]
        res[f"switch{name}_ahead"] = {"steps": probes[-1]["ahead_steps"],
                                      "ms_per_step": statistics.median(per) if per else None}
    if args.prefill:
        res["prefill"] = prefill_rounds(peer, mdir, args.prefill, args.repeats, args.vocab)
    if args.trace_overhead:
        res["trace_overhead"] = trace_rounds(mdir, n, args.repeats)  # whole command, --trace / without
    return res


def summary(args: argparse.Namespace, res: dict[str, Any]) -> str:
    m = {k: v * 1e3 for k, v in res["marginal_s_per_token"].items()}
    lines = [res["machine"] + (f" [numba target {args.numba_cpu}: its kernel paths on this host's silicon]"
                               if args.numba_cpu else ""),
             f"hidden {args.hidden}: CLI {m['cli']:.1f} ms/tok (its decode loop {m['cli_decode']:.1f}), "
             f"driver {m['driver']:.1f}, transformers fp32 eager {m['transformers']:.1f} -> "
             f"CLI {res['cli_vs_transformers']:.2f}x, decode loop {res['cli_decode_vs_transformers']:.2f}x, "
             f"driver {res['driver_vs_transformers']:.2f}x transformers",
             f"  CLI from the first decode token (N-token run less a 1-token run, first steps and "
             f"switches included) {m['cli_from_start']:.1f} ms/tok -> "
             f"{res['cli_from_start_vs_transformers']:.2f}x; the same window on the N-token run's own "
             f"clock {m['cli_window']:.1f} ms/tok -> {res['cli_window_vs_transformers']:.2f}x",
             f"  CLI processes' own CPU time (all threads; steadier where other work shares the cores): "
             f"{res['cli_cpu_s_per_token']['marginal'] * 1e3:.1f} ms/tok marginal, "
             f"{res['cli_cpu_s_per_token']['from_start'] * 1e3:.1f} from the first decode token",
             f"  INT4 host floor {res['host_floor_s_per_token'] * 1e3:.1f} ms/tok: "
             f"CLI {res['cli_over_floor']:.2f}x the floor, decode loop {res['cli_decode_over_floor']:.2f}x",
             f"  setup {res['setup_s']:.3f} s (outside generation {res['outside_generation_s']:.2f} s); "
             f"program switch at a new span bucket {res['switch_ms'] or float('nan'):.1f} ms wall, "
             f"{res['switch_cpu_ms'] or float('nan'):.1f} ms CPU (built ahead over "
             f"{res['switch_ahead']['steps']} earlier steps, "
             f"{res['switch_ahead']['ms_per_step'] or 0.0:.1f} ms wall / "
             f"{res['switch_cpu_ahead']['ms_per_step'] or 0.0:.1f} ms CPU each)"]
    pf = res.get("prefill")
    if pf and "error" in pf:
        lines.append(f"  prefill: failed ({pf['error']})")
    elif pf:
        rates = f"CLI {pf['cli_tok_per_s']:.1f} tok/s, transformers {pf['transformers_tok_per_s']:.1f} tok/s"
        lines.append(f"  prefill {pf['prompt_tokens']} tokens: {rates} -> {pf['cli_vs_transformers']:.2f}x")
    if "trace_overhead" in res:
        lines.append(f"  --trace costs {res['trace_overhead']:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.probe_switch:
        print(json.dumps(probe_switch(args.probe_switch, args.tokens)))
        return 0
    if args.peer:
        return serve_peer(args.peer, args.threads)
    if args.numba_cpu:  # before numba reads its configuration; the child processes inherit it
        os.environ["NUMBA_CPU_NAME"], os.environ["NUMBA_CPU_FEATURES"] = args.numba_cpu, "+64bit"
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("NUMBA_NUM_THREADS", str(args.threads))
    from npukit.targets.pccx.fast import kernels as kx

    # the CPU, every kernel family's path, and the one the pccx INT4 rows take (the first fast family)
    machine = f"{machine_line(*INT4_FAMILIES)}; pccx INT4 rows: {kx.simd()}"
    print(machine, file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        res = measure(args, Path(tmp) / "m")
    res["machine"] = machine
    if args.numba_cpu:
        res["numba_cpu"] = {"name": args.numba_cpu,
                            "note": "that CPU class's kernel paths, run on this host's silicon"}
    res["tier"] = "measured (s/token, tok/s, ms: medians of interleaved runs); ratios derived"
    print(json.dumps(res, indent=2) if args.json else summary(args, res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
