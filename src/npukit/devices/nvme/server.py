"""``npukit nvme serve``: one NVM subsystem with one file-backed namespace, served over NVMe/TCP,
plus the discovery controller. SIGTERM/SIGINT stop it cleanly (data flushed, state marked clean);
kill -9 leaves it marked running, so the next start counts an unsafe shutdown."""

from __future__ import annotations

import asyncio
import json
import logging
import os
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
from npukit.devices.nvme.tcp import TcpTarget, new_event_loop
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
    workers: int | None = None  # I/O queue worker processes; None: one per CPU where supported, 0: none
    receive: str = "buffers"  # "buffers": recv_into a buffer per connection; "stream": asyncio StreamReader


def worker_count(cfg: ServeConfig) -> int:
    """How many worker processes serve I/O queues (0 where descriptors cannot be passed)."""
    from npukit.devices.nvme.workers import workers_supported

    if cfg.workers is not None:
        if cfg.workers < 0:
            raise ConfigError(f"--workers {cfg.workers}: 0 or more")
        if cfg.workers and not workers_supported():
            raise ConfigError("--workers needs descriptor passing (Linux); use --workers 0")
        return cfg.workers
    return (os.cpu_count() or 1) if workers_supported() else 0


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


def check_port_free(host: str, port: int) -> None:
    """Fail before any file is created when the port is taken (as the listener will bind it, with
    address reuse, so a port in TIME_WAIT still passes)."""
    import socket

    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(addr)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


async def _listen(target: TcpTarget, host: str, port: int) -> int:
    try:
        return await target.listen(host, port)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


async def run_target(cfg: ServeConfig, announce=print,
                     extend: Callable[[Subsystem], dict[str, Any]] | None = None) -> int:
    """Serve until SIGTERM/SIGINT, and return that signal's number. ``extend(subsystem)`` installs
    extensions (vendor commands) before the listener opens and returns extra fields for the ready
    announcement. Busy ports fail before the namespace file or state folder is created."""
    host, port = split_hostport(cfg.listen)
    check_port_free(host, port)
    if cfg.discovery_port is not None:
        check_port_free(host, cfg.discovery_port)
    sub = build_subsystem(cfg)
    extra = extend(sub) if extend is not None else {}
    target = TcpTarget([sub], workers=worker_count(cfg), receive=cfg.receive)
    try:
        bound = await _listen(target, host, port)
        disc_bound = None
        if cfg.discovery_port is not None:
            disc = discovery_subsystem([sub], cfg.advertise or host, str(bound))
            target.subsystems[disc.nqn] = disc
            disc_bound = await _listen(target, host, cfg.discovery_port)
        announce(json.dumps({"event": "ready", "nqn": sub.nqn, "address": host, "port": bound,
                             "discovery_port": disc_bound, "namespace": str(cfg.namespace),
                             "blocks": sub.namespaces[1].blocks,
                             "workers": target.pool.pids if target.pool is not None else [], **extra}))
        sys.stdout.flush()
        stop = asyncio.Event()
        stopped_by: list[int] = []
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda s=sig: (stopped_by.append(s), stop.set()))
        await stop.wait()
        return stopped_by[0]
    finally:
        await target.close()
        sub.close()


def exit_status(stopped_by: int) -> int:
    """Ctrl-C (SIGINT) exits 130 as every other command does; SIGTERM is a clean stop (0)."""
    return 128 + signal.SIGINT if stopped_by == signal.SIGINT else 0


def serve(cfg: ServeConfig) -> int:
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return exit_status(runner.run(run_target(cfg)))
