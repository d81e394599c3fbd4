"""npukit: formats, ISAs, bit-exact simulators, compilers and perf ledgers for quantized LLM accelerators.

The Python API (docs/api.md) is reachable from here: `load_model`, `compile_model`, `generate`, `estimate`,
`sweep`, `hardware`, `write_vectors` and their result types. They are attributes loaded on first use
(PEP 562), so ``import npukit`` (and ``npukit --help``) imports nothing heavy.
"""

from typing import Any

from npukit.errors import ConfigError, DecodeError, FormatError, ModelError, NpukitError

__version__ = "0.1.0"

_API = ("Generation", "Model", "PerfReport", "Session", "SweepResult", "TensorInfo", "TfliteModel",
        "TfliteResult", "compile_model", "estimate", "generate", "hardware", "hardware_presets", "load_model",
        "model_presets", "sweep", "list_targets", "write_vectors")

__all__ = ["ConfigError", "DecodeError", "FormatError", "ModelError", "NpukitError", "__version__", *_API]

def __getattr__(name: str) -> Any:
    if name in _API:  # by name, not an import statement: lower layers import `npukit` for its errors
        import importlib

        value = getattr(importlib.import_module("npukit.api"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'npukit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
