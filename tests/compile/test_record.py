"""`npukit.compile.record.Recorder`: results unchanged, recorded calls in order with NumPy's shapes."""

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from npukit.compile.record import Recorder


class _Ops:
    @staticmethod
    def add(a, b, *, scale=1.0):
        return (a + b) * scale

    @staticmethod
    def helper(x):
        return x


@dataclass
class _Recording(Recorder, _Ops):
    recorded: ClassVar[frozenset[str]] = frozenset({"add"})


def test_records_named_calls_and_passes_results_through():
    r = _Recording()
    x, y = np.arange(6.0).reshape(2, 3), np.ones((2, 3))
    got = r.add(x, y, scale=2.0)
    assert np.array_equal(got, (x + y) * 2.0)
    r.helper(x)  # not in `recorded`
    r.add(x, 1.0, scale=np.ones(3))
    assert r.trace == [("add", (np.shape(x), np.shape(y)), {"scale": 2.0}),
                       ("add", (np.shape(x), None), {"scale": (3,)})]
    assert r.counts() == {"add": 2}
    assert _Recording().trace == []  # one trace per instance
