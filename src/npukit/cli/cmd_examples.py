"""``npukit examples [DIR]``: copy the example programs, firmware and models that ship inside the
package into DIR (default ``examples``), so the README's commands run as written after a pip install."""

from __future__ import annotations

import argparse
from pathlib import Path

from npukit.cli import ui
from npukit.errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("examples", help="copy the shipped examples (pccx programs, eBPF firmware, models, "
                       "the API notebook) into a folder")
    p.add_argument("out_dir", nargs="?", default="examples", metavar="DIR",
                   type=ui.output_file("DIR", directory=True),
                   help="folder to fill (default: ./examples; created; files in it are replaced)")
    p.add_argument("--list", action="store_true", help="list the files, copy nothing")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def shipped() -> Path:
    """The examples folder inside the installed package (in a clone: a link to ./examples)."""
    from importlib.resources import files

    root = Path(str(files("npukit") / "examples"))
    if not root.is_dir():
        raise ConfigError("this npukit installation carries no examples folder")
    return root


def _files(root: Path) -> list[Path]:
    skip = {"__pycache__", ".ipynb_checkpoints"}
    return sorted(p.relative_to(root) for p in root.rglob("*")
                  if p.is_file() and not skip & set(p.relative_to(root).parts))


def run(args: argparse.Namespace) -> int:
    import shutil

    root = shipped()
    files = _files(root)
    out = Path(args.out_dir)
    if not args.list:
        if out.resolve() == root.resolve():
            raise ConfigError(f"{out} is the shipped examples folder itself")
        for rel in files:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / rel, out / rel)
    if args.json:
        ui.emit_json({"from": str(root), "out": None if args.list else str(out),
                      "files": [str(f) for f in files]})
    elif args.list:
        for f in files:
            print(f)
    else:
        print(f"copied {len(files)} files into {out}/ (from {root})")
    return 0
