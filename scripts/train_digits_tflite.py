"""Reproduce src/npukit/assets/digits-int8/: train a 64-32-10 MLP on scikit-learn's digits (75/25
stratified split, seed 0), quantize it to int8 with npukit's writer, report held-out accuracy.

    .venv/bin/python scripts/train_digits_tflite.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np

from npukit.models.tflite import digits


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "src/npukit/assets"
                   / digits.ASSET)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    import sklearn
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    split = digits.load_split()
    clf = MLPClassifier(hidden_layer_sizes=(32,), activation="relu", alpha=1e-3, max_iter=600,
                        random_state=args.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(split.x_train / 16.0, split.y_train)
    float_acc = float(clf.score(split.x_test / 16.0, split.y_test))
    model = digits.build_int8(clf.coefs_[0], clf.intercepts_[0], clf.coefs_[1], clf.intercepts_[1],
                              split.x_train)
    images = digits.quantize_images(split.x_test)
    pred, _ = digits.predict(model, images)
    acc = float((pred == split.y_test).mean())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "digits_int8.tflite").write_bytes(model)
    metrics = {
        "dataset": "sklearn.datasets.load_digits (1797 8x8 images, 10 classes)",
        "split": {"test_size": digits.TEST_SIZE, "random_state": digits.SPLIT_SEED, "stratify": True},
        "n_train": int(split.y_train.size), "n_test": int(split.y_test.size),
        "model": "MLP 64-32(ReLU)-10, int8 per-channel FC1, per-tensor FC2, int8 softmax",
        "float_accuracy": round(float_acc, 6),
        "int8_accuracy": round(acc, 6),
        "int8_correct": int((pred == split.y_test).sum()),
        "evaluated_with": "npukit reference interpreter (bit-exact with LiteRT BUILTIN_REF)",
        "trainer": f"scikit-learn {sklearn.__version__} MLPClassifier(hidden_layer_sizes=(32,), alpha=1e-3, "
                   f"max_iter=600, random_state={args.seed})",
    }
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    pick = np.arange(0, split.y_test.size, split.y_test.size // 8)[:8]
    np.savez_compressed(args.out / "samples.npz", images=images[pick],
                        labels=split.y_test[pick].astype(np.int64))
    print(f"float accuracy {float_acc:.4f}, int8 accuracy {acc:.4f} on {split.y_test.size} held-out digits; "
          f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
