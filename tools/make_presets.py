"""Regenerate gputrain_kit/presets.json: layer profiles of the memory widget's preset models.

    .venv/bin/python tools/make_presets.py

The notebook reads the stored profiles so it never builds InceptionV3 (about 0.5 GB of process
memory); tests/unit/test_memory.py rebuilds the models and checks the stored numbers.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import astuple
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def build(key: str):
    import keras

    from gputrain_kit.training import build_digits_model

    if key == "inception_v3":
        return keras.applications.InceptionV3(weights=None, input_shape=(299, 299, 3))
    if key == "resnet50":
        return keras.applications.ResNet50(weights=None, input_shape=(224, 224, 3))
    if key == "digits":
        return build_digits_model()
    raise ValueError(key)


def main() -> int:
    import gputrain_kit as kit
    from gputrain_kit.memory import PRESETS, profile

    kit.setup(devices=1)
    table = {key: [list(astuple(s)) for s in profile(build(key))] for key in PRESETS.values()
             if not key.startswith("dense_stack")}  # computed, not stored: see memory.dense_stack_profile
    target = ROOT / "gputrain_kit" / "presets.json"
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(table, handle, separators=(",", ":"))
    os.replace(tmp, target)
    print(f"wrote {target} ({', '.join(f'{k}: {len(v)} layers' for k, v in table.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
