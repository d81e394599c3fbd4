import os

from hypothesis import HealthCheck, settings

# CI shares 2 cores between workers: no per-example deadlines, bounded example counts.
# Under CI the examples are derandomized (a landing is never decided by a lucky draw); local runs
# keep exploring, and what they find is fixed in the test or the code.
settings.register_profile(
    "npukit", deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow],
    derandomize=bool(os.environ.get("CI")),
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "npukit"))
