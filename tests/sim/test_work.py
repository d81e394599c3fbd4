"""`work_from` / `make_work`: records filled in one dict update are the dataclass's own records."""

import dataclasses

import pytest

from npukit.sim.work import PLAIN_WORK, WORK_DEFAULTS, Work, make_work, work_at, work_from

FULL = dict(macs=3, sfu_elems=4, weight_bytes=5, ddr_read_bytes=6, ddr_write_bytes=7, onchip_read_bytes=8,
            onchip_write_bytes=9, is_async=True, reads=((1, 2),), writes=((3, 4), (5, 6)), lanes=2)


@pytest.mark.parametrize("kw", [{}, FULL, {"reads": ((0, 8),), "is_async": True}])
def test_make_work_is_the_dataclass_record(kw):
    got, want = make_work(7, "gemv", "gemv dest=0x10", **kw), Work(7, "gemv", "gemv dest=0x10", **kw)
    assert PLAIN_WORK  # (else make_work calls the dataclass itself and this test proves less)
    assert got == want and hash(got) == hash(want) and repr(got) == repr(want) and vars(got) == vars(want)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.macs = 1  # type: ignore[misc]


def test_work_from_a_records_fields_is_replace():
    base = Work(1, "sfu", "cvo", **FULL)
    got = work_from(vars(base), index=40, label="cvo again", macs=0)
    assert got == dataclasses.replace(base, index=40, label="cvo again", macs=0)
    assert vars(base)["index"] == 1  # (the template is not touched)
    assert set(WORK_DEFAULTS) == {f.name for f in dataclasses.fields(Work)} - {"index", "engine", "label"}


def test_work_at_is_replace_of_the_index_alone():
    base = Work(1, "sfu", "cvo", **FULL)
    template = vars(base)
    got = work_at(template, 40)
    want = dataclasses.replace(base, index=40)
    assert got == want and hash(got) == hash(want) and repr(got) == repr(want) and vars(got) == vars(want)
    assert vars(got) is not template and template["index"] == 1  # (its own fields; the template untouched)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.index = 2  # type: ignore[misc]
