import os

from hypothesis import HealthCheck, settings

# CI shares 2 cores between workers: no per-example deadlines, bounded example counts.
settings.register_profile(
    "npukit", deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "npukit"))
