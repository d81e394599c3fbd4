"""npukit: formats, ISAs, bit-exact simulators, compilers and perf ledgers for quantized LLM accelerators."""

from npukit.errors import ConfigError, DecodeError, FormatError, ModelError, NpukitError

__version__ = "0.1.0"
__all__ = ["ConfigError", "DecodeError", "FormatError", "ModelError", "NpukitError", "__version__"]
