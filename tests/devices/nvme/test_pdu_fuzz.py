"""Hostile PDUs against a real ``npukit nvme serve``: the captured Linux kernel session (our own
recording of the QEMU guest, tests/devices/nvme/data/linux_session.bin), targeted violations whose
outcome the NVMe/TCP specification names, and a reduced fuzz campaign (tools/nvme_fuzz.py --full runs
10^5 PDUs; figures in docs/devices/nvme.md)."""

import socket
import struct
from pathlib import Path

import pytest

from npukit.devices.nvme import capture, fuzz, pdu
from npukit.devices.nvme.client import NvmeTcpHost

CAPTURE = Path(__file__).parent / "data" / "linux_session.bin"


@pytest.fixture(scope="module")
def session():
    return capture.load(CAPTURE)


@pytest.fixture
def server(tmp_path):
    srv = fuzz.ServerProcess(tmp_path)
    yield srv
    srv.stop()


def test_capture_is_the_kernel_session_described_by_the_spec(session):
    kinds = [(c.kind, c.qid, c.digests) for c in session]
    assert kinds == [(capture.DISCOVERY, 0, (False, False)), (capture.NVM, 0, (True, True)),
                     (capture.NVM, 1, (True, True))]
    for conn in session:
        ic = conn.pdus[0]  # ICReq: type 0, HLEN 128, PLEN 128, PFV 0 (TCP transport spec, figure 26)
        assert pdu.CH.unpack_from(ic) [:5:2] == (0, 128, 128) and ic[8:10] == b"\0\0"
        connect = conn.pdus[1]  # Connect: CH + SQE (+ header digest) + 1024-byte data (+ data digest)
        hd, dd = conn.digests
        assert len(connect) == 8 + 64 + 4 * hd + 1024 + 4 * dd and connect[8] == 0x7F and connect[9] == 0x40
    io = session[2]
    assert any(raw[0] == pdu.PduType.H2C_DATA for raw in io.pdus)  # a write through R2T/H2CData


def test_replayed_kernel_session_succeeds(server, session):
    """The kernel's own admin and I/O streams replayed verbatim (I/O Connect bound to a live
    controller): every command succeeds (the vendor opcode nvme-cli sent: see below)."""
    ident = fuzz.identity_of(session)
    with NvmeTcpHost("127.0.0.1", server.port, fuzz.GUEST_NQN, hostnqn=ident.hostnqn, hostid=ident.hostid,
                     io_queues=0) as helper:
        disc, admin, io = session
        out = fuzz.exchange(server.discovery_port, disc.pdus, expect=answered(disc.pdus))
        assert out.term is None and out.statuses == [0] * answered(disc.pdus)
        out = fuzz.exchange(server.port, admin.pdus, expect=answered(admin.pdus))
        # nvme-cli's vendor admin opcode C2h: Invalid Command Opcode (DNR) without a vendor handler, success
        # with the Alkali accelerator's handler installed
        assert out.term is None and len(out.statuses) == answered(admin.pdus)
        assert set(out.statuses) <= {0, 0x4001} and out.statuses.count(0x4001) <= 1
        stream = [fuzz.patch_connect(r, cntlid=helper.cntlid) if fuzz._is_connect(r) else r for r in io.pdus]
        out = fuzz.exchange(server.port, stream, expect=answered(stream))
        assert out.term is None and out.statuses == [0] * answered(stream)


def answered(stream):
    """Commands that complete now: all but Asynchronous Event Requests (opcode 0Ch, admin)."""
    return sum(1 for raw in stream if raw[0] == pdu.PduType.CAPSULE_CMD and raw[8] != 0x0C)


def test_targeted_violations_get_the_spec_outcome(server, session):
    """Each case's expected C2HTermReq FES or NVMe status comes from the NVMe/TCP transport spec
    (FES 01h..05h) and the fabrics spec (Connect Invalid Parameters 1/82h, Transient Transport 0/22h);
    other connections keep working throughout."""
    ident = fuzz.identity_of(session)
    with NvmeTcpHost("127.0.0.1", server.port, fuzz.GUEST_NQN, hostnqn=ident.hostnqn, hostid=ident.hostid,
                     io_queues=0) as owner, NvmeTcpHost("127.0.0.1", server.port, fuzz.GUEST_NQN,
                                                         io_queues=1) as bystander:
        cases = fuzz.targeted_cases(ident, owner.cntlid, qid=2)
        assert len(cases) >= 15
        problems = []
        for name, stream, expect in cases:
            out = fuzz.exchange(server.port, stream)
            problems.append(fuzz.check_expectation(name, out, expect))
            bystander.write(4096, bytes([len(problems)]) * 512)
            assert bystander.read(4096, 1) == bytes([len(problems)]) * 512
        assert [p for p in problems if p] == []
    assert server.alive() and "connection handler failed" not in server.log_text()


def test_existing_queue_connect_is_refused_and_the_first_keeps_working(server, session):
    ident = fuzz.identity_of(session)
    with NvmeTcpHost("127.0.0.1", server.port, fuzz.GUEST_NQN, hostnqn=ident.hostnqn, hostid=ident.hostid,
                     io_queues=1) as h:
        again = fuzz.exchange(server.port, [fuzz.icreq(), fuzz.connect_pdu(1, h.cntlid, fuzz.GUEST_NQN,
                                                                            ident.hostnqn, ident.hostid)])
        assert again.statuses == [fuzz.STATUS_CONNECT_INVALID_PARAMETERS]
        h.write(0, b"\x5a" * 4096)
        assert h.read(0, 8) == b"\x5a" * 4096


def test_r2t_pacing_bounds_what_a_peer_makes_the_target_buffer(server):
    """64 writes of 128 KiB announced at once: R2Ts are paced (never more than CONN_R2T_BYTES asked for
    and not yet sent), yet every write completes and reads back."""
    from npukit.devices.nvme.tcp import CONN_R2T_BYTES

    with NvmeTcpHost("127.0.0.1", server.port, fuzz.GUEST_NQN, io_queues=1, queue_size=128) as h:
        q = h.io_qs[0]
        blobs = {}
        for k in range(64):
            cid = q.next_cid()
            blobs[cid] = bytes([k]) * (128 * 1024)
            sqe = fuzz._sqe(0x01, cid, 1, {10: 256 * k, 12: 255}, sgl_len=128 * 1024)
            q._send(pdu.capsule_cmd(sqe))
        requested, most, done = 0, 0, 0
        while done < 64:
            p = q.read_pdu()
            if p.type == pdu.PduType.R2T:
                cccid, ttag, offset, length = pdu.data_fields(p)
                requested += length
                most = max(most, requested)
                q._send_h2c(cccid, ttag, memoryview(blobs[cccid])[offset:offset + length], offset)
                requested -= length
            elif p.type == pdu.PduType.CAPSULE_RESP:
                assert struct.unpack_from("<H", p.header, 22)[0] >> 1 == 0
                done += 1
        assert most <= CONN_R2T_BYTES
        for k in (0, 31, 63):
            assert h.read(256 * k, 256) == bytes([k]) * (128 * 1024)


@pytest.mark.slow
def test_reduced_fuzz_campaign(session, tmp_path):
    report = fuzz.run_campaign(session, min_pdus=5000, min_connections=100, seed=17, workers=4,
                               directory=tmp_path)
    assert report["pdus"] >= 5000 and report["connections"] >= 100
    assert report["violations"] == [] and report["probe_failures"] == []
    assert report["server_alive"] and report["final_probe"] is None and report["escaped_exceptions"] == 0
    assert report["cases_over_deadline"] == 0
    assert report["terminated_connections"] > 0 and report["connections_with_nvme_errors"] > 0
    assert report["rss_mib"]["max"] - report["rss_mib"]["start"] < 64


def test_a_half_sent_pdu_then_silence_is_closed_by_the_connect_timeout(tmp_path):
    from npukit.devices.nvme.namespace import Namespace
    from npukit.devices.nvme.subsystem import Subsystem
    from npukit.devices.nvme.tcp import TargetThread

    sub = Subsystem(fuzz.GUEST_NQN, [Namespace(tmp_path / "ns.img", size=1 << 20)])
    t = TargetThread([sub])
    t.target.connect_timeout = 0.5
    try:
        s = socket.create_connection(("127.0.0.1", t.port), timeout=5)
        s.sendall(fuzz.icreq()[:60])  # half an ICReq, then nothing: a half-open peer
        assert s.recv(4096) == b""  # the target closed it
        s.close()
    finally:
        t.stop()
        sub.close()
