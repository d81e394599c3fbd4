"""An NVM subsystem: namespaces, persistent state, the handler registry and its controllers."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from npukit.devices.nvme.admin import register_admin
from npukit.devices.nvme.controller import Controller
from npukit.devices.nvme.logs import DiscoveryEntry, discovery_page
from npukit.devices.nvme.namespace import Namespace
from npukit.devices.nvme.nvm import register_nvm
from npukit.devices.nvme.registry import CommandRegistry, LogPageSpec
from npukit.devices.nvme.spec import DISCOVERY_NQN, LogPage, NvmeError, Status
from npukit.devices.nvme.state import DeviceState
from npukit.errors import ConfigError

log = logging.getLogger("npukit.nvme")


@dataclass
class FirmwareStaging:
    """An image being downloaded. It belongs to the subsystem, per host NQN, so that separate
    associations (one per ``npukit nvme`` invocation, as nvme-cli's separate runs) can download and
    commit; it is kept until a commit or a target restart."""

    image: bytearray = field(default_factory=bytearray)
    ranges: list[tuple[int, int]] = field(default_factory=list)

    def clear(self) -> None:
        self.image, self.ranges = bytearray(), []


def default_registry() -> CommandRegistry:
    """A registry holding every standard admin and NVM handler; extensions register into a copy."""
    registry = CommandRegistry()
    register_admin(registry)
    register_nvm(registry)
    return registry


def _valid_nqn(nqn: str) -> bool:
    return 0 < len(nqn.encode()) < 224 and nqn.isascii()


class Subsystem:
    def __init__(self, nqn: str, namespaces: list[Namespace] | None = None,
                 state: DeviceState | None = None, *,
                 allowed_hosts: set[str] | None = None, max_io_queues: int = 64, max_queue_entries: int = 128,
                 mdts: int = 5, in_capsule_bytes: int = 8192, discovery: bool = False,
                 registry: CommandRegistry | None = None) -> None:
        if not _valid_nqn(nqn):
            raise ConfigError(f"NQN {nqn!r} must be 1..223 ASCII bytes")
        self.nqn = nqn
        self.namespaces = {ns.nsid: ns for ns in namespaces or []}
        self.state = state or DeviceState(None)
        self.allowed_hosts = allowed_hosts
        self.max_io_queues = max_io_queues
        self.max_queue_entries = max_queue_entries
        self.mdts = mdts
        self.in_capsule_bytes = in_capsule_bytes
        self.discovery = discovery
        self.registry = registry or default_registry()
        self.controllers: dict[int, Controller] = {}
        self.temperature_k = 298  # the Alkali firmware's composite temperature (25 °C)
        self._next_cntlid = 1
        self.discovery_entries: list[DiscoveryEntry] = []
        self.discovery_genctr = 0
        self._fw_staging: dict[str, FirmwareStaging] = {}
        # discovery subsystems only: NQN -> which hosts may see that entry (the target's allow-list)
        self.entry_filters: dict[str, Callable[[str], bool]] = {}
        if discovery:
            self.registry.register_log_page(LogPage.DISCOVERY, LogPageSpec("discovery", _discovery_log),
                                            replace=True)
        if self.state.firmware.next_slot:  # an activation pending "at the next reset": this start
            fw = self.state.firmware
            fw.active_slot, fw.next_slot = fw.next_slot, 0
            self.state.save()

    # controllers ------------------------------------------------------------------------------------
    def new_controller(self, *, hostnqn: str = "", fabrics: bool = True, **kwargs) -> Controller:
        for _ in range(0xFFEF):
            cntlid = self._next_cntlid
            self._next_cntlid = self._next_cntlid % 0xFFEF + 1
            if cntlid not in self.controllers:
                break
        else:
            raise NvmeError(Status.CONNECT_CONTROLLER_BUSY, "no free controller ID")
        ctrl = Controller(self, cntlid, fabrics=fabrics, discovery=self.discovery, hostnqn=hostnqn, **kwargs)
        self.controllers[cntlid] = ctrl
        return ctrl

    def remove_controller(self, cntlid: int) -> None:
        self.controllers.pop(cntlid, None)

    def firmware_staging(self, hostnqn: str) -> FirmwareStaging:
        return self._fw_staging.setdefault(hostnqn, FirmwareStaging())

    def host_allowed(self, hostnqn: str) -> bool:
        return self.allowed_hosts is None or hostnqn in self.allowed_hosts

    # namespaces and persistence -------------------------------------------------------------------
    @property
    def write_cache(self) -> bool:
        return all(ns.write_cache for ns in self.namespaces.values())

    def set_write_cache(self, enabled: bool) -> None:
        for ns in self.namespaces.values():
            if not enabled:
                ns.flush()  # turning the cache off makes what it held durable first
            ns.write_cache = enabled

    def shutdown_flush(self) -> None:
        for ns in self.namespaces.values():
            ns.flush()
        self.state.save()

    def close(self) -> None:
        """A clean stop: data durable, state marked not running (no unsafe shutdown next start)."""
        for ns in self.namespaces.values():
            ns.close()
        self.state.save(running=False)


def _discovery_log(ctrl: Controller, cmd) -> bytes:
    sub = ctrl.subsystem
    if not sub.discovery:
        raise NvmeError(Status.INVALID_LOG_PAGE, "the discovery log exists on discovery controllers only")
    entries = [e for e in sub.discovery_entries
               if e.subnqn not in sub.entry_filters or sub.entry_filters[e.subnqn](ctrl.hostnqn)]
    return discovery_page(entries, sub.discovery_genctr)


def discovery_subsystem(targets: list[Subsystem], traddr: str, trsvcid: str) -> Subsystem:
    """The well-known discovery subsystem listing ``targets`` at one address (hosts not on a
    target's allow-list do not see it)."""
    disc = Subsystem(DISCOVERY_NQN, discovery=True, max_io_queues=0)
    disc.discovery_entries = [DiscoveryEntry(t.nqn, traddr, trsvcid) for t in targets]
    disc.entry_filters = {t.nqn: t.host_allowed for t in targets}
    disc.discovery_genctr = 1
    return disc
