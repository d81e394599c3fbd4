"""The LiteRT oracle runner lives with the fixed-point tests (tests/formats/_litert_models.py);
make it importable from here too, and share a cache directory fixture for downloaded models."""

import sys
from pathlib import Path

_FORMATS = Path(__file__).resolve().parents[2] / "formats"
if str(_FORMATS) not in sys.path:
    sys.path.insert(0, str(_FORMATS))
