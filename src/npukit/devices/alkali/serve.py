"""``npukit nvme serve`` with the Alkali accelerators installed (``--accelerators``, ``--delegate``,
``--compat``): the NVMe target of ``npukit.devices.nvme.server`` plus `AlkaliDevice` on its subsystem."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from npukit.devices.alkali.spec import FLAVORS
from npukit.errors import ConfigError

if TYPE_CHECKING:
    from npukit.devices.nvme.server import ServeConfig
    from npukit.devices.nvme.tcp import TcpTarget


@dataclass(frozen=True)
class AlkaliOptions:
    accelerators: int = 1
    delegate: str = "exact"
    compat: str = "doc"


def add_serve_arguments(p) -> None:
    """The flags ``npukit nvme serve`` gains (called from cmd_nvme)."""
    p.add_argument("--accelerators", type=int, default=1,
                   help="Alkali accelerators behind the vendor commands (default 1; 0 = plain NVMe)")
    p.add_argument("--delegate", choices=("exact", "alkali"), default="exact",
                   help="tflite_vta numerics: exact = LiteRT's, alkali = the board's VTA delegate "
                   "(default exact)")
    p.add_argument("--compat", choices=sorted(FLAVORS), default="doc",
                   help="vendor command fields as the document (doc, default) or the reference firmware")


async def _listen(target: TcpTarget, host: str, port: int) -> int:
    try:
        return await target.listen(host, port)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


async def run_target(cfg: ServeConfig, opts: AlkaliOptions, announce=print) -> None:
    from npukit.devices.alkali.device import AlkaliDevice
    from npukit.devices.nvme.server import build_subsystem, split_hostport
    from npukit.devices.nvme.subsystem import discovery_subsystem
    from npukit.devices.nvme.tcp import TcpTarget

    host, port = split_hostport(cfg.listen)
    device = AlkaliDevice(opts.accelerators, flavor=FLAVORS[opts.compat](), delegate=opts.delegate)
    sub = build_subsystem(cfg)
    device.install(sub)
    target = TcpTarget([sub])
    try:
        bound = await _listen(target, host, port)
        disc_bound = None
        if cfg.discovery_port is not None:
            disc = discovery_subsystem([sub], cfg.advertise or host, str(bound))
            target.subsystems[disc.nqn] = disc
            disc_bound = await _listen(target, host, cfg.discovery_port)
        announce(json.dumps({"event": "ready", "nqn": sub.nqn, "address": host, "port": bound,
                             "discovery_port": disc_bound, "namespace": str(cfg.namespace),
                             "blocks": sub.namespaces[1].blocks, "accelerators": opts.accelerators,
                             "delegate": opts.delegate, "compat": opts.compat}))
        sys.stdout.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await target.close()
        sub.close()


def serve(cfg: ServeConfig, opts: AlkaliOptions) -> int:
    if opts.accelerators == 0:
        from npukit.devices.nvme.server import serve as plain

        return plain(cfg)
    if opts.accelerators < 0:
        raise ConfigError("--accelerators must be 0 or more")
    asyncio.run(run_target(cfg, opts))
    return 0
