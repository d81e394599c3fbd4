"""``npukit nvme serve`` with the Alkali accelerators installed (``--accelerators``, ``--delegate``,
``--compat``): the NVMe target of ``npukit.devices.nvme.server`` plus `AlkaliDevice` on its subsystem."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from npukit.devices.alkali.spec import FLAVORS
from npukit.errors import ConfigError

if TYPE_CHECKING:
    from npukit.devices.nvme.server import ServeConfig


@dataclass(frozen=True)
class AlkaliOptions:
    accelerators: int = 1
    delegate: str = "exact"
    compat: str = "doc"
    verify: str | None = None  # strict | warn | off; None: strict, off with --compat reference


def add_serve_arguments(p) -> None:
    """The flags ``npukit nvme serve`` gains (called from cmd_nvme)."""
    p.add_argument("--accelerators", type=int, default=1,
                   help="Alkali accelerators behind the vendor commands (default 1; 0 = plain NVMe)")
    p.add_argument("--delegate", choices=("exact", "alkali"), default="exact",
                   help="tflite_vta numerics: exact = LiteRT's, alkali = the board's VTA delegate "
                   "(default exact)")
    p.add_argument("--compat", choices=sorted(FLAVORS), default="doc",
                   help="vendor command fields as the document (doc, default) or the reference firmware")
    p.add_argument("--verify", choices=("strict", "warn", "off"), default=None,
                   help="verify firmware before it is activated or started: strict rejects (NVMe status "
                   "Invalid Firmware Image, reason in log page 0xC0), warn logs and runs, off skips "
                   "(default strict; off with --compat reference, as the board)")


async def run_target(cfg: ServeConfig, opts: AlkaliOptions, announce=print) -> int:
    """The NVMe/TCP target of `npukit.devices.nvme.server` with `AlkaliDevice` on its subsystem."""
    from npukit.devices.alkali.device import AlkaliDevice
    from npukit.devices.nvme.server import run_target as run_nvme_target

    device = AlkaliDevice(opts.accelerators, flavor=FLAVORS[opts.compat](), delegate=opts.delegate,
                          verify=opts.verify)

    def install(sub) -> dict:
        device.install(sub)
        return {"accelerators": opts.accelerators, "delegate": opts.delegate, "compat": opts.compat}

    return await run_nvme_target(cfg, announce, install)


def serve(cfg: ServeConfig, opts: AlkaliOptions) -> int:
    if opts.accelerators == 0:
        from npukit.devices.nvme.server import serve as plain

        return plain(cfg)
    if opts.accelerators < 0:
        raise ConfigError("--accelerators must be 0 or more")
    from npukit.devices.nvme.server import exit_status
    from npukit.devices.nvme.tcp import new_event_loop

    with asyncio.Runner(loop_factory=new_event_loop) as runner:  # uvloop when installed, as nvme serve
        return exit_status(runner.run(run_target(cfg, opts)))
