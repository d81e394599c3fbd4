"""Entry point: ``npukit <command> ...``. Typed npukit errors become one line and exit status 2."""

from __future__ import annotations

import argparse
import sys

import npukit
from npukit.errors import NpukitError
from npukit.plugins import import_prefixed


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="npukit",
        description="Custom AI accelerators, real before silicon: formats, ISAs, bit-exact simulators, "
        "compilers, runtimes and evidence-tiered performance ledgers.",
    )
    parser.add_argument("--version", action="version", version=f"npukit {npukit.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for module in import_prefixed("npukit.cli", "cmd_"):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0
    try:
        from npukit.cli.ui import check_args

        check_args(args)  # output paths (and a --hw file) before any work
        return int(args.func(args) or 0)
    except NpukitError as exc:
        print(f"npukit: error: {str(exc).removeprefix(': ')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("npukit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
