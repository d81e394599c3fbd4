"""``npukit nvme serve``: one NVM subsystem with one file-backed namespace, served over NVMe/TCP,
plus the discovery controller. SIGTERM/SIGINT stop it cleanly (data flushed, state marked clean);
kill -9 leaves it marked running, so the next start counts an unsafe shutdown."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npukit.devices.nvme.namespace import Namespace
from npukit.devices.nvme.spec import DEFAULT_DISCOVERY_PORT
from npukit.devices.nvme.state import DeviceState
from npukit.devices.nvme.subsystem import Subsystem, discovery_subsystem
from npukit.devices.nvme.tcp import TcpTarget
from npukit.errors import ConfigError


@dataclass
class ServeConfig:
    listen: str = "127.0.0.1:4420"
    nqn: str = "nqn.2026-11.io.npukit:nvme0"
    namespace: str = "nvme0.img"
    size: int | None = None
    state_dir: str | None = None
    discovery_port: int | None = DEFAULT_DISCOVERY_PORT  # None: no discovery listener
    advertise: str | None = None  # address written into discovery log entries
    allow_hosts: tuple[str, ...] = ()
    io_queues: int = 64


def split_hostport(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"listen address {text!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def build_subsystem(cfg: ServeConfig) -> Subsystem:
    ns = Namespace(cfg.namespace, nsid=1, size=cfg.size)  # first: a bad file leaves no state behind
    state_dir = Path(cfg.state_dir) if cfg.state_dir else Path(str(cfg.namespace) + ".state")
    try:
        state = DeviceState(state_dir)
    except BaseException:
        ns.close()
        raise
    handler = logging.FileHandler(state_dir / "target.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("npukit.nvme").addHandler(handler)
    logging.getLogger("npukit.nvme").setLevel(logging.INFO)
    return Subsystem(cfg.nqn, [ns], state, allowed_hosts=set(cfg.allow_hosts) or None,
                     max_io_queues=cfg.io_queues)


async def _listen(target: TcpTarget, host: str, port: int) -> int:
    try:
        return await target.listen(host, port)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


async def run_target(cfg: ServeConfig, announce=print,
                     extend: Callable[[Subsystem], dict[str, Any]] | None = None) -> None:
    """Serve until SIGTERM/SIGINT. ``extend(subsystem)`` installs extensions (vendor commands) before
    the listener opens and returns extra fields for the ready announcement."""
    host, port = split_hostport(cfg.listen)
    sub = build_subsystem(cfg)
    extra = extend(sub) if extend is not None else {}
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
                             "blocks": sub.namespaces[1].blocks, **extra}))
        sys.stdout.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await target.close()
        sub.close()


def serve(cfg: ServeConfig) -> int:
    asyncio.run(run_target(cfg))
    return 0
