"""What the doctor's smoke test does, as notebook 00 and ``python -m gputrain_kit doctor --help`` say it: in a fresh
process, ``setup(devices=2)``, one epoch of ``fit`` under MirroredStrategy that is 2 steps (8 samples in batches of
4, each split over the 2 replicas), then a read of the allocator's memory statistics."""
from __future__ import annotations

from gputrain_kit import doctor
from conftest import last_json, run_python


def test_the_smoke_test_trains_one_epoch_of_two_steps_on_two_replicas_and_reads_memory_statistics():
    proc = run_python("""
        import json, keras
        steps, epochs, per_replica = [], [], []
        real_fit = keras.Model.fit

        def fit(self, *args, **kwargs):                 # count what the smoke test's fit runs
            kwargs["callbacks"] = list(kwargs.get("callbacks") or []) + [keras.callbacks.LambdaCallback(
                on_train_batch_end=lambda batch, logs: steps.append(batch),
                on_epoch_end=lambda epoch, logs: epochs.append(epoch))]
            per_replica.append(kwargs["batch_size"] // self.distribute_strategy.num_replicas_in_sync)
            return real_fit(self, *args, **kwargs)

        keras.Model.fit = fit
        from gputrain_kit._children import smoke
        values = smoke.run()
        print(json.dumps({"steps": len(steps), "epochs": len(epochs), "per_replica": per_replica, **values}))
    """, env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    out = last_json(proc)
    assert (out["epochs"], out["steps"], out["replicas"]) == (1, 2, 2)
    assert out["per_replica"] == [2]
    assert out["memory_statistics"] == "ok"


def test_the_doctor_says_what_quick_skips():
    """The --quick help names the smoke test's one epoch of 2 steps, not "one step"."""
    import contextlib
    import io

    import pytest

    text = io.StringIO()
    with contextlib.redirect_stdout(text), pytest.raises(SystemExit):
        doctor.main(["--help"])
    said = " ".join(text.getvalue().split())
    assert "one epoch of 2 steps on 2 devices" in said and "memory statistics" in said
