"""load_verified names a learning-rate schedule as the cause when it is the only difference between the file's
optimizer state and the model's: a schedule has no learning-rate variable, so Adam with one holds one variable
fewer (5 against 6 for one Dense layer). Another optimizer keeps the general cause."""
from __future__ import annotations

from conftest import last_json, run_python

SCHEDULE = """
    import json, os, tempfile, warnings
    import numpy as np
    import gputrain_kit as kit
    kit.setup(devices=1)
    import keras
    from gputrain_kit.saving import LoadError

    folder = tempfile.mkdtemp()
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 5)).astype("float32"), rng.normal(size=(32, 2)).astype("float32")

    def make(optimizer):
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(2)])
        model.compile(optimizer, "mse")
        return model

    def schedule():
        return keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(1e-3, 10, 0.9))

    out = {}
    for name, optimizer in (("schedule", schedule()), ("constant", keras.optimizers.Adam(1e-3))):
        model = make(optimizer)
        model.fit(x, y, epochs=1, verbose=0)
        out[name + "_variables"] = len(model.optimizer.variables)
        kit.save_verified(model, os.path.join(folder, name + ".weights.h5"))
    for name, target, path in (("into_constant", lambda: make("adam"), "schedule"),
                               ("into_schedule", lambda: make(schedule()), "constant"),
                               ("into_sgd", lambda: make(keras.optimizers.SGD(momentum=0.9)), "schedule"),
                               ("same", lambda: make(schedule()), "schedule")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                kit.load_verified(target(), os.path.join(folder, path + ".weights.h5"))
                out[name] = None
            except LoadError as err:
                out[name] = str(err)
    print(json.dumps(out))
"""


def test_a_schedule_against_a_constant_learning_rate_is_named_as_the_cause():
    out = last_json(run_python(SCHEDULE))
    assert (out["schedule_variables"], out["constant_variables"]) == (5, 6)
    assert out["same"] is None                                     # a schedule into a schedule loads
    into_constant, into_schedule, into_sgd = out["into_constant"], out["into_schedule"], out["into_sgd"]
    assert "the file's had a learning-rate schedule, the model's has a constant learning rate" in into_constant
    assert "the file's had a constant learning rate, the model's has a learning-rate schedule" in into_schedule
    for text in (into_constant, into_schedule):
        assert "a schedule has no learning-rate variable" in text and "another optimizer" not in text
        assert "The model was left unchanged" in text and len(text) <= 600
    assert "the file was saved with another optimizer" in into_sgd and "learning-rate schedule" not in into_sgd


def test_schedule_differs_reads_only_the_learning_rate_slot():
    from gputrain_kit.saving import _schedule_differs

    def layout(*shapes):
        return {f"optimizer/vars/{i}": shape for i, shape in enumerate(shapes)}

    constant = layout((), (), (5, 2), (2,), (5, 2), (2,))          # step, learning rate, Adam's 4 slots
    scheduled = layout((), (5, 2), (2,), (5, 2), (2,))
    assert _schedule_differs(scheduled, constant) == "file"
    assert _schedule_differs(constant, scheduled) == "model"
    assert _schedule_differs(constant, constant) is None
    assert _schedule_differs(layout((), (), (5, 2)), scheduled) is None          # another optimizer (SGD)
    assert _schedule_differs(layout((), (5, 2), (2,)), layout((), (), (5, 3), (2,))) is None   # other shapes
    assert _schedule_differs({"optimizer/inner/vars/0": ()}, constant) is None    # a nested optimizer's groups
