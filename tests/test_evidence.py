import math

import pytest

from npukit.evidence import Figure, Ledger, Tier


def test_ledger_json_shape_and_order():
    led = Ledger()
    led.add("b", 2.0, "GB/s", "measured", "timed here")
    led.add("a", 1.5, "tok/s", Tier.PROJECTED, "roofline")
    js = led.to_json()
    assert list(js["figures"]) == ["b", "a"]
    assert js["figures"]["a"] == {"value": 1.5, "unit": "tok/s", "tier": "projected", "source": "roofline"}


def test_figure_rejects_unknown_tier_and_missing_source():
    with pytest.raises(ValueError):
        Figure(1.0, "s", "guessed", "x")
    with pytest.raises(ValueError):
        Figure(1.0, "s", "derived", "")


def test_non_finite_values_serialize():
    assert Figure(math.inf, "s", "derived", "x").to_json()["value"] == "inf"
    assert Figure(math.nan, "s", "derived", "x").to_json()["value"] is None


def test_weakest_tier_is_never_measured():
    assert Tier.weakest(Tier.MEASURED, Tier.MEASURED) is Tier.DERIVED
    assert Tier.weakest(Tier.MEASURED, Tier.PROJECTED) is Tier.PROJECTED
