"""Plug-in discovery: import every module of a package whose name starts with a prefix.

CLI commands (``cli/cmd_*``), model families (``models/family_*``) and generation backends
(``runtime/backend_*``) register themselves on import, so adding one never edits a shared list.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def prefixed_names(package: str, prefix: str) -> list[str]:
    """Names of the ``package.<prefix>*`` modules in name order, without importing them."""
    pkg = importlib.import_module(package)
    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if m.name.startswith(prefix))


def import_prefixed(package: str, prefix: str) -> list[ModuleType]:
    """Import ``package.<prefix>*`` modules in name order and return them."""
    return [importlib.import_module(f"{package}.{name}") for name in prefixed_names(package, prefix)]
