"""docs/memory.md's table: every family's estimate against its measurements (measured.json, measure_all.py).

    .venv/bin/python tools/memfam/table.py      # prints the Markdown table
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import families  # noqa: E402

import gputrain_kit as kit  # noqa: E402

kit.setup(devices=1)
measured = json.loads((HERE / "measured.json").read_text())
print("| family | batch | precision | estimate (MB) | oneDNN peak (MB) | ratio | Eigen peak (MB) | ratio |")
print("|---|---|---|---|---|---|---|---|")
for name, (build, batch) in families.FAMILIES.items():
    for policy in ("float32", "mixed_bfloat16"):
        estimate = kit.estimate_memory(build, batch_size=batch, dtype_policy=policy).peak
        cells = []
        for family in ("onednn", "eigen"):
            m = measured.get(f"{name}|{policy}|{family}")
            cells += [f"{m['peak'] / 1e6:.1f}", f"{m['peak'] / estimate:.2f}"] if m else ["", ""]
        print(f"| {name} | {batch} | {policy} | {estimate / 1e6:.1f} | " + " | ".join(cells) + " |")
