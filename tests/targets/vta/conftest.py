"""Reuse the TFLite random-model builders (tests/models/tflite) and the LiteRT BUILTIN_REF runner
(tests/formats)."""

import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parents[2]
for sub in ("formats", "models/tflite"):
    p = str(_TESTS / sub)
    if p not in sys.path:
        sys.path.insert(0, p)
