"""npukit: formats, ISAs, bit-exact simulators, compilers and perf ledgers for quantized LLM accelerators."""

import os

from npukit.errors import ConfigError, DecodeError, FormatError, ModelError, NpukitError

# numba's parallel kernels run on GNU OpenMP, whose idle threads spin by default: with any other
# process on the cores (2 here) they steal the time their siblings need. Measured on a 2-core machine
# with one busy core: a 32-token pccx decode took 5.7-7.6 s spinning, 0.68-0.75 s passive. A user's
# own setting wins; it must be set before the OpenMP runtime starts (first parallel kernel).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
__all__ = ["ConfigError", "DecodeError", "FormatError", "ModelError", "NpukitError", "__version__"]
