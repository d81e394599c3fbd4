"""Error locations by field name and the queue state table, checked against the specifications' figures."""

from __future__ import annotations

import struct

import pytest

from npukit.devices.nvme.command import Command
from npukit.devices.nvme.layout import COMMAND_FIELDS, SQE_FIELDS, connect_data_offset, field_offset
from npukit.devices.nvme.lifecycle import (
    TRANSITIONS,
    QueueEvent,
    QueueLifecycle,
    QueueState,
    TransitionError,
)

# NVMe base specification 1.4, Figure 105 (Common Command Format): byte offsets of the SQE fields
SPEC_SQE_OFFSETS = {"opcode": 0, "flags": 1, "cid": 2, "nsid": 4, "cdw2": 8, "cdw3": 12, "mptr": 16,
                    "dptr": 24, "cdw10": 40, "cdw11": 44, "cdw12": 48, "cdw13": 52, "cdw14": 56,
                    "cdw15": 60}
# Command figures: Create I/O SQ (QSIZE bits 31:16 of CDW10, CQID 31:16 of CDW11), Set Features
# (SV bit 31 of CDW10), Identify (CSI 31:24 of CDW11), Fabrics Connect (QID 31:16 of CDW10 = byte 42,
# SQSIZE byte 44), Property Set (ATTRIB byte 40, OFST byte 44, VALUE byte 48), Connect data
# (Fabrics 1.1 Figure 20: CNTLID byte 16, SUBNQN 256, HOSTNQN 512)
SPEC_COMMAND_OFFSETS = {"queue.qsize": 42, "queue.cqid": 46, "features.sv": 43, "features.sel": 41,
                        "identify.csi": 47, "connect.qid": 42, "connect.sqsize": 44,
                        "property.attrib": 40, "property.ofst": 44, "property.value": 48, "fctype": 4,
                        # docs/devices/alkali.md: accelerator CDW12, firmware ID / control op CDW13, NLB CDW14
                        "alkali.accel_id": 48, "alkali.fw_id": 52, "alkali.control_op": 52, "alkali.nlb": 56}


def test_common_fields_match_the_spec_figure():
    assert {name: field_offset(name) for name in SQE_FIELDS} == SPEC_SQE_OFFSETS


@pytest.mark.parametrize(("name", "offset"), sorted(SPEC_COMMAND_OFFSETS.items()))
def test_command_fields_match_the_spec_figures(name, offset):
    assert field_offset(name) == offset


def test_every_field_lands_on_the_value_it_names():
    # a command whose every byte is its own offset: the field's first byte is where we say it is
    raw = bytes(range(64))
    cmd = Command.decode(raw)
    for name in SQE_FIELDS:
        value = getattr(cmd, name)
        first = value[0] if isinstance(value, bytes) else value & 0xFF
        assert first == field_offset(name), name
    for name in COMMAND_FIELDS:
        assert 0 <= field_offset(name) < 64


def test_connect_data_offsets():
    assert [connect_data_offset(n) for n in ("hostid", "cntlid", "subnqn", "hostnqn")] == [0, 16, 256, 512]
    page = bytearray(1024)
    struct.pack_into("<H", page, connect_data_offset("cntlid"), 0xFFFF)
    assert page[16:18] == b"\xff\xff"


def test_unknown_field_is_a_key_error():
    with pytest.raises(KeyError):
        field_offset("cdw16")


def test_queue_lifecycle_in_order():
    life = QueueLifecycle()
    assert not life.initialized
    assert life.advance(QueueEvent.IC_REQ) is QueueState.AWAIT_CONNECT
    assert life.initialized
    assert life.advance(QueueEvent.CONNECT) is QueueState.LIVE
    assert life.advance(QueueEvent.DISCONNECT) is QueueState.DISCONNECTING
    assert life.advance(QueueEvent.CLOSE) is QueueState.CLOSED
    assert life.closed


@pytest.mark.parametrize("state", list(QueueState))
def test_every_state_can_close_and_nothing_follows_closed(state):
    assert TRANSITIONS[(state, QueueEvent.CLOSE)] is QueueState.CLOSED
    life = QueueLifecycle(QueueState.CLOSED)
    for event in (QueueEvent.IC_REQ, QueueEvent.CONNECT, QueueEvent.DISCONNECT):
        with pytest.raises(TransitionError):
            life.advance(event)


def test_out_of_order_events_are_refused():
    with pytest.raises(TransitionError):
        QueueLifecycle().advance(QueueEvent.CONNECT)  # Connect before ICReq
    with pytest.raises(TransitionError):
        QueueLifecycle(QueueState.LIVE).advance(QueueEvent.CONNECT)  # a second Connect
    with pytest.raises(TransitionError):
        QueueLifecycle(QueueState.AWAIT_CONNECT).advance(QueueEvent.DISCONNECT)


def test_only_a_live_queue_is_handed_over_and_the_main_side_then_ends():
    assert QueueLifecycle(QueueState.LIVE).advance(QueueEvent.HAND_OVER) is QueueState.HANDED_OVER
    for state in (QueueState.AWAIT_IC_REQ, QueueState.AWAIT_CONNECT, QueueState.DISCONNECTING):
        with pytest.raises(TransitionError):  # unconnected queues stay in the main process
            QueueLifecycle(state).advance(QueueEvent.HAND_OVER)
    handed = QueueLifecycle(QueueState.HANDED_OVER)
    for event in (QueueEvent.IC_REQ, QueueEvent.CONNECT, QueueEvent.DISCONNECT, QueueEvent.HAND_OVER):
        with pytest.raises(TransitionError):
            handed.advance(event)
    assert handed.advance(QueueEvent.CLOSE) is QueueState.CLOSED
