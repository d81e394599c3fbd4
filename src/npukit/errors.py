"""Typed errors. Every user-facing failure is one of these, carrying a one-line reason.

The CLI catches `NpukitError` and prints ``npukit: error: <reason>`` with a non-zero exit, so a
malformed file or config never surfaces as a traceback from deep inside.
"""

from __future__ import annotations


class NpukitError(Exception):
    """Base class: the message is a single line a user can act on."""


class FormatError(NpukitError, ValueError):
    """Bad input to a number-format routine (dtype, shape, block multiple, code out of range)."""


class ConfigError(NpukitError, ValueError):
    """Bad hardware description, preset name, override or model config."""


class ModelError(NpukitError, ValueError):
    """A model file or checkpoint that cannot be loaded (truncated, corrupt, mismatched, unsupported)."""


class DecodeError(NpukitError, ValueError):
    """An instruction word that does not decode; carries the word (any width: ``bits``; a multi-word
    instruction as one integer, words little-end first) and the reason."""

    def __init__(self, word: int, reason: str, bits: int = 64) -> None:
        self.word = int(word)
        self.reason = reason
        self.bits = int(bits)
        super().__init__(f"cannot decode 0x{self.word:0{-(-self.bits // 4)}X}: {reason}")
