from dataclasses import dataclass
from pathlib import Path

import pytest

from npukit.devices.alkali.accelerator import AcceleratorConfig
from npukit.devices.alkali.device import AlkaliDevice
from npukit.devices.alkali.host import AlkaliHost
from npukit.devices.alkali.spec import Flavor
from npukit.devices.nvme.client import NvmeStatusError, NvmeTcpHost
from npukit.devices.nvme.namespace import Namespace
from npukit.devices.nvme.subsystem import Subsystem
from npukit.devices.nvme.tcp import TargetThread

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "alkali"
NQN = "nqn.2026-11.io.npukit:alkali-test"
SMALL = AcceleratorConfig(input_size=64 << 10, output_size=4 << 10, firmware_size=16 << 10, slots=4,
                          budget=3_000_000)

# r1 = input, r2 = output, r3 = input length: copy the input into the output buffer, return its length
COPY_FW = """
mov %r4, 0
loop:
jge %r4, %r3, end
mov %r5, %r1
add %r5, %r4
ldxb %r0, [%r5]
mov %r5, %r2
add %r5, %r4
stxb [%r5], %r0
add %r4, 1
ja loop
end:
mov %r0, %r3
exit
"""
# a store far past the output buffer
OOB_FW = "mov %r0, 7\nstxb [%r2+30000], %r0\nmov %r0, 0\nexit\n"
# never ends: stopped by the instruction budget
SPIN_FW = "mov %r0, 0\nloop:\nadd %r0, 1\nja loop\nexit\n"
# helper 4 get_args(dst, max): the start command's argument list into the output buffer
ARGS_FW = "mov %r1, %r2\nmov %r2, 64\ncall 4\nexit\n"


@dataclass
class Rig:
    sub: Subsystem
    dev: AlkaliDevice
    thread: TargetThread
    host: AlkaliHost

    def status_of(self, fn, *args, **kw) -> int:
        """The 11-bit status (SCT/SC) a command completes with (0 = success)."""
        try:
            fn(*args, **kw)
        except NvmeStatusError as exc:
            return exc.cqe.status & 0x7FF
        return 0


def make_rig(tmp_path, *, accelerators=2, flavor=None, delegate="exact", config=SMALL,
             verify: str | None = "warn") -> Rig:
    """``verify`` defaults to warn here, not to the device's strict: these rigs run hand-written
    out-of-bounds firmware on purpose, and the shipped examples bound their output by the real
    device's 64 MiB, which SMALL's 4 KiB buffer cannot hold (``verify=None``: the device default)."""
    sub = Subsystem(NQN, [Namespace(tmp_path / "ns.img", size=4 << 20)])
    dev = AlkaliDevice(accelerators, flavor=flavor, delegate=delegate, config=config,
                       verify=verify).install(sub)
    thread = TargetThread([sub])
    host = AlkaliHost(NvmeTcpHost("127.0.0.1", thread.port, NQN, io_queues=1), flavor=flavor)
    return Rig(sub, dev, thread, host)


@pytest.fixture
def rig(tmp_path):
    r = make_rig(tmp_path)
    yield r
    r.host.close()
    r.dev.wait_idle(30)
    r.thread.stop()
    r.sub.close()


@pytest.fixture
def ref_rig(tmp_path):
    r = make_rig(tmp_path, accelerators=1, flavor=Flavor.reference())
    yield r
    r.host.close()
    r.dev.wait_idle(30)
    r.thread.stop()
    r.sub.close()
