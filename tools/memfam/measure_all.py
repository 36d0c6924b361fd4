"""Measure every family of families.py with measure_memory: float32 and mixed_bfloat16, under the kernel family
given (onednn or eigen). Writes JSON to stdout-file. Usage: measure_all.py KERNELS OUT.json [family ...]"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import families  # noqa: E402

import gputrain_kit as kit  # noqa: E402

kernels, out = sys.argv[1], Path(sys.argv[2])
names = sys.argv[3:] or list(families.FAMILIES)
results = json.loads(out.read_text()) if out.exists() else {}
for name in names:
    build, batch = families.FAMILIES[name]
    levers = {p: {"dtype_policy": p} for p in ("float32", "mixed_bfloat16")}
    got = kit.measure.measure_levers(build, levers, batch_size=batch, processes=1, kernels=kernels)
    for p, m in got.items():
        results[f"{name}|{p}|{kernels}"] = {"peak": m.peak_bytes, "state": m.state_bytes, "batch": batch}
        print(name, p, kernels, m.peak_bytes / 1e6, m.state_bytes / 1e6, flush=True)
    out.write_text(json.dumps(results, indent=1, sort_keys=True))
