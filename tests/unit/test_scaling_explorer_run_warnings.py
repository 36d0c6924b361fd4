"""ScalingExplorer.run, headless: a global batch below the replica count (2 on 4) trains (or is refused) without
train_digits' ArgumentOrderWarning ("were two swapped?") reaching the learner's stderr, as preview() keeps it off:
the explorer's split table already shows the empty replicas."""
from __future__ import annotations

from conftest import last_json, run_python


def test_run_with_a_batch_below_the_replica_count_warns_nothing():
    proc = run_python("""
        import json, re, warnings, gputrain_kit as kit
        kit.setup(devices=4)
        from gputrain_kit.batching import ArgumentOrderWarning, plan_batches
        with warnings.catch_warnings(record=True) as direct:        # the warning run() must keep off
            warnings.simplefilter("always")
            plan_batches(1438, 2, 4)
        ex = kit.widgets.ScalingExplorer(epochs=1, batch=2, mode="global")
        ex.replicas.value = 4
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            row = ex.run()
        print(json.dumps({"direct": [w.category.__name__ for w in direct],
                          "seen": [f"{w.category.__name__}: {w.message}" for w in seen
                                   if issubclass(w.category, ArgumentOrderWarning)],
                          "global": row["global batch"], "replicas": row["replicas"],
                          "status": re.sub(r"<[^>]+>", "", ex.status.value)[:200]}))
    """)
    out = last_json(proc)
    assert out["direct"] == ["ArgumentOrderWarning"], out             # the case does warn outside the explorer
    assert out["seen"] == [], out
    assert (out["global"], out["replicas"]) == (2, 4), out
    assert out["status"] == "done." or "splits unevenly" in out["status"], out
    assert "were two swapped" not in proc.stderr, proc.stderr[-2000:]
