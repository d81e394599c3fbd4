"""`npukit tflite info` names the schema's enums (as the `tflite` package's generated schema does)."""

from __future__ import annotations

import json

import tflite

from npukit.cli.main import main


def test_info_shows_enum_names(capsys) -> None:
    assert main(["tflite", "info", "zoo:digits", "--json"]) == 0
    ops = json.loads(capsys.readouterr().out)["ops"]
    assert main(["tflite", "info", "zoo:digits"]) == 0
    text = capsys.readouterr().out
    names = {v: k for k, v in vars(tflite.ActivationFunctionType).items() if not k.startswith("_")}
    fc = [op for op in ops if op["name"] == "FULLY_CONNECTED"]
    assert fc
    for op in fc:
        act = names[op["options"]["fused_activation_function"]]
        assert f"fused_activation_function={act}," in text
    assert "fused_activation_function=RELU" in text  # the hidden layer of the digits model
    assert "fused_activation_function=1" not in text
