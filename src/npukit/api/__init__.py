"""npukit's Python API: the pipeline the CLI runs, as typed objects (docs/api.md).

    import npukit
    model = npukit.load_model()                                # embedded tiny Gemma 3n
    session = npukit.compile_model(model, "pccx", hw="pccx-v002-kv260")
    gen = session.generate([2, 651], max_new_tokens=4)
    gen.tokens, gen.cycles_per_token, gen.ledger               # tiered figures
    npukit.estimate(model, "pccx-v002-kv260").joules_per_token

Everything heavy is imported when first called, so ``import npukit`` stays cheap.
"""

from npukit.api.models import Model, TensorInfo, TfliteModel, TfliteResult, load_model, model_presets
from npukit.api.perf import PerfReport, SweepResult, estimate, hardware, hardware_presets, sweep
from npukit.api.session import Generation, Session, compile_model, generate, list_targets
from npukit.api.vectors import write_vectors

__all__ = [
           "Generation",
           "Model",
           "PerfReport",
           "Session",
           "SweepResult",
           "TensorInfo",
           "TfliteModel",
           "TfliteResult",
           "compile_model",
           "estimate",
           "generate",
           "hardware",
           "hardware_presets",
           "list_targets",
           "load_model",
           "model_presets",
           "sweep",
           "write_vectors",
]
