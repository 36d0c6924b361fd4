"""kit.parallel.reduction_in_use: a one-replica strategy (the default strategy ``model.distribute_strategy`` returns
outside any scope, OneDeviceStrategy) is answered "no cross-device reduction", not "unknown (this TensorFlow ...)",
which sent a learner to blame their TensorFlow version; what is no strategy is refused with the fix."""
from __future__ import annotations

from conftest import last_json, run_python


def test_one_replica_strategies_reduce_nothing_and_mirrored_ones_name_their_op():
    out = last_json(run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=2)
        import keras, tensorflow as tf
        from gputrain_kit.parallel import reduction_in_use
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        answers = {"model.distribute_strategy": reduction_in_use(model.distribute_strategy),
                   "default": reduction_in_use(tf.distribute.get_strategy()),
                   "one device": reduction_in_use(tf.distribute.OneDeviceStrategy(kit.device_names(1)[0])),
                   "mirrored, 2": reduction_in_use(tf.distribute.MirroredStrategy(
                       kit.device_names(2), cross_device_ops=tf.distribute.ReductionToOneDevice()))}
        refused = {}
        for name, wrong in [("model", model), ("None", None), ("str", "MirroredStrategy")]:
            try:
                reduction_in_use(wrong)
            except ValueError as err:
                refused[name] = str(err)
        print(json.dumps({"answers": answers, "refused": refused}))
    """))
    answers = out["answers"]
    assert answers["model.distribute_strategy"] == answers["default"] == \
        "no cross-device reduction: one replica (_DefaultDistributionStrategy)", answers
    assert answers["one device"] == "no cross-device reduction: one replica (OneDeviceStrategy)", answers
    assert answers["mirrored, 2"] == "ReductionToOneDevice", answers
    assert not any("unknown" in a for a in answers.values()), answers
    assert sorted(out["refused"]) == ["None", "model", "str"], out
    for message in out["refused"].values():
        assert message.startswith("reduction_in_use: strategy must be a tf.distribute strategy, got "), message
        assert "Fix: pass the strategy itself, e.g. reduction_in_use(model.distribute_strategy)" in message
    assert "got Sequential." in out["refused"]["model"] and "got NoneType." in out["refused"]["None"]
