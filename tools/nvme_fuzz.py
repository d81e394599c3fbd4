#!/usr/bin/env python3
"""NVMe/TCP target fuzzer and session capture.

  tools/nvme_fuzz.py capture            # boot the Linux guest through a recording proxy and write
                                        # tests/devices/nvme/data/linux_session.bin
  tools/nvme_fuzz.py run [--full]       # fuzz a fresh `npukit nvme serve`; --full: 10^5 PDUs, 1000+
                                        # connections; prints a JSON report
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import signal
import struct
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from npukit.devices.nvme import capture as cap  # noqa: E402
from npukit.devices.nvme import fuzz  # noqa: E402

FIXTURE = ROOT / "tests" / "devices" / "nvme" / "data" / "linux_session.bin"
GUEST_NQN = "nqn.2026-11.io.npukit:guest"
KEEP_R2T_WRITES, KEEP_CAPSULE_WRITES = 2, 4


def _builder():
    path = ROOT / "tools" / "qemu_guest" / "build_guest.py"
    spec = importlib.util.spec_from_file_location("build_guest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trim(conn: cap.CapturedConnection) -> cap.CapturedConnection:
    """Keep the first few large (R2T) and in-capsule writes of an I/O connection, with their data;
    the rest of the 1 MiB pattern adds bytes, not protocol variety."""
    kept, r2t_writes, capsule_writes, dropped_cids = [], 0, 0, set()
    for raw in conn.pdus:
        if raw[0] == 0x04 and raw[8] == 0x01:  # CapsuleCmd carrying a Write
            cid = struct.unpack_from("<H", raw, 10)[0]
            if raw[8 + 39] == 0x5A:
                r2t_writes += 1
                if r2t_writes > KEEP_R2T_WRITES:
                    dropped_cids.add(cid)
                    continue
            else:
                capsule_writes += 1
                if capsule_writes > KEEP_CAPSULE_WRITES:
                    continue
        if raw[0] == 0x06:
            cid = struct.unpack_from("<H", raw, 8)[0]
            if cid in dropped_cids:
                if raw[1] & 0x04:
                    dropped_cids.discard(cid)
                continue
        kept.append(raw)
    return cap.CapturedConnection(conn.kind, kept)


def run_capture(out: Path) -> int:
    builder = _builder()
    manifest = builder.build()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        serve = subprocess.Popen(
            [sys.executable, "-m", "npukit", "nvme", "serve", "--listen", "127.0.0.1:0", "--discovery-port",
             "0", "--advertise-addr", "10.0.2.2", "--nqn", GUEST_NQN, "--namespace", str(tmp / "ns.img"),
             "--size", str(64 << 20), "--state-dir", str(tmp / "state")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            ready = json.loads(serve.stdout.readline())
            proxy = cap.RecordingProxy({cap.NVM: ready["port"], cap.DISCOVERY: ready["discovery_port"]})
            hostid = str(uuid.uuid4())
            env = (f"HOST=10.0.2.2\nPORT={proxy.ports[cap.NVM]}\nDISC_PORT={proxy.ports[cap.DISCOVERY]}\n"
                   f"NQN={GUEST_NQN}\nHOSTNQN=nqn.2014-08.org.nvmexpress:uuid:{hostid}\nHOSTID={hostid}\n")
            script = (ROOT / "tools" / "qemu_guest" / "nvme_check.sh").read_text()
            files = {"/test.env": env, "/test.sh": script}
            initrd = builder.script_archive(manifest, files, tmp / "initrd.gz")
            subprocess.run(builder.qemu_command(manifest, initrd, tmp / "results.txt"), capture_output=True,
                           timeout=600)
            proxy.close()
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(15)
    conns = [trim(c) for c in proxy.connections if c.pdus]
    cap.save(out, conns)
    summary = [{"kind": c.kind, "qid": c.qid, "digests": c.digests, "pdus": len(c.pdus),
                "bytes": sum(map(len, c.pdus))} for c in conns]
    print(json.dumps({"capture": str(out), "connections": summary}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = p.add_subparsers(dest="verb", required=True)
    c = verbs.add_parser("capture", help="record the Linux kernel client's session (QEMU)")
    c.add_argument("--out", type=Path, default=FIXTURE)
    r = verbs.add_parser("run", help="fuzz a fresh npukit nvme serve")
    r.add_argument("--full", action="store_true", help="10^5 PDUs over >= 1000 connections")
    r.add_argument("--pdus", type=int, default=5000)
    r.add_argument("--connections", type=int, default=100)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--workers", type=int, default=4)
    r.add_argument("--capture", type=Path, default=FIXTURE)
    args = p.parse_args(argv)
    if args.verb == "capture":
        return run_capture(args.out)
    pdus, conns = (100_000, 1000) if args.full else (args.pdus, args.connections)
    report = fuzz.run_campaign(cap.load(args.capture), min_pdus=pdus, min_connections=conns, seed=args.seed,
                               workers=args.workers)
    print(json.dumps(report, indent=1))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
