import importlib.util
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# CI shares 2 cores between workers: no per-example deadlines, bounded example counts.
# Under CI the examples are derandomized (a landing is never decided by a lucky draw); local runs
# keep exploring, and what they find is fixed in the test or the code.
settings.register_profile(
    "npukit", deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow],
    derandomize=bool(os.environ.get("CI")),
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "npukit"))


@pytest.fixture(scope="session")
def load_benchmark():
    """``load_benchmark("nvme_tcp")``: the script ``benchmarks/nvme_tcp.py`` as module ``bench_nvme_tcp``
    (registered in sys.modules first: its dataclasses look their module up there)."""
    def load(name: str):
        path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        return mod
    return load
