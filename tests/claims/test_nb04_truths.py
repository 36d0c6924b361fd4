"""Notebook 04's claims added by the third truth pass (issue 44), checked on the installed Keras and h5py.

Section 1: a rebuilt wrapper takes the wrapper's optimizer state only with its optimizer built first (or through
load_verified). Section 2: what load_verified does not check (the optimizer's class; whether the model's optimizer
state belongs with the weights). Section 5: what save_verified compares; BackupAndRestore with ``save_freq=N``
restarts the unfinished epoch at batch 0 on top of a mid-epoch backup. Section 6: one fixed-length attribute of a
large model's layer names is over HDF5's limit; today's legacy writer splits the layer names and the optimizer's
weight names. Each group runs in one fresh child process (device setup is per process).
"""
from __future__ import annotations

import inspect

import pytest

from conftest import last_json, run_python

WRAPPER = """
    import json, os, tempfile, warnings, numpy as np, gputrain_kit as kit
    kit.setup(devices=2)
    import keras
    from gputrain_kit.parallel import MultiGpuLike
    d = tempfile.mkdtemp(); (x, y), _ = kit.data.digits()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    def template():
        m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu", name="hidden"),
                              keras.layers.Dense(10, name="logits")])
        m.compile("adam", loss); m.optimizer.build(m.trainable_variables); return m
    def rebuilt():
        w = MultiGpuLike(template(), kit.device_names(2)); w.compile("adam", loss); w(x[:2]); return w
    state = lambda m: [v.numpy() for v in m.optimizer.variables]
    same = lambda a, b: len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b))
    trained = MultiGpuLike(template(), kit.device_names(2)); trained.compile("adam", loss)
    trained.fit(x, y, batch_size=128, epochs=1, verbose=0)
    path = os.path.join(d, "wrapper.weights.h5"); trained.save_weights(path)
    out = {"trained_step": int(trained.optimizer.iterations)}
    plain = rebuilt()
    out["compiled_variables"] = len(plain.optimizer.variables)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain.load_weights(path)
    out["plain"] = [int(plain.optimizer.iterations), [str(w.message) for w in caught],
                    same(plain.get_weights(), trained.get_weights())]
    built = rebuilt(); built.optimizer.build(built.trainable_variables)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built.load_weights(path)
    out["built"] = [int(built.optimizer.iterations), len(caught), same(state(built), state(trained))]
    verified = kit.load_verified(rebuilt(), path)
    out["verified"] = [int(verified.optimizer.iterations), same(state(verified), state(trained)),
                       same(verified.get_weights(), trained.get_weights())]

    # section 2: the wrapper's file into a fresh template (its Adam built): no weight loads, the optimizer state does
    victim = template(); weights_before = victim.get_weights()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        victim.load_weights(path, skip_mismatch=True)
    out["skip"] = [same(weights_before, victim.get_weights()), int(victim.optimizer.iterations),
                   same(state(victim), state(trained)), [str(w.message).splitlines()[0] for w in caught]]
    failed = template()                      # section 1: load_weights raises, after loading the optimizer state
    try:
        failed.load_weights(path); out["raised"] = None
    except ValueError as err:
        out["raised"] = [str(err).splitlines()[0], int(failed.optimizer.iterations), same(state(failed), state(trained))]
    for built in (True, False):              # kit.load_verified refuses it and puts the optimizer state back
        target = template()
        if not built:
            target.compile("adam", loss)     # a fresh Adam: its step counter and learning rate only
        weights_before, state_before = target.get_weights(), state(target)
        try:
            kit.load_verified(target, path); refused = False
        except kit.saving.LoadError:
            refused = True
        out[f"verified refused, optimizer built {built}"] = [
            refused, same(weights_before, target.get_weights()), same(state_before, state(target)),
            int(target.optimizer.iterations)]
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def wrapper():
    return last_json(run_python(WRAPPER))


def test_a_rebuilt_wrapper_with_a_fresh_adam_skips_the_optimizer_state_with_one_warning(wrapper):
    """Section 1: compile() creates Adam's step counter and learning rate only; load_weights then loads the
    weights and skips the optimizer's state, with Keras's warning, leaving Adam at step 0."""
    step, said, weights_loaded = wrapper["plain"]
    assert wrapper["trained_step"] > 0 and wrapper["compiled_variables"] == 2
    assert step == 0 and weights_loaded
    assert any(m.startswith("Skipping variable loading for optimizer") and "has 2 variables" in m for m in said)


def test_building_the_optimizer_first_or_load_verified_restores_the_wrappers_state(wrapper):
    """Section 1: the fix: optimizer.build(trainable_variables) before load_weights, or kit.load_verified."""
    assert wrapper["built"] == [wrapper["trained_step"], 0, True]
    assert wrapper["verified"] == [wrapper["trained_step"], True, True]


def test_skip_mismatch_loads_no_weight_but_the_wrappers_optimizer_state_into_the_templates(wrapper):
    """Section 2 (issue 44): the file's top-level optimizer group (the wrapper's Adam) fits the fresh template's
    built Adam, and Keras loads it: the victim keeps its weights and takes the wrapper's step count and moments."""
    weights_unchanged, step, same_state, said = wrapper["skip"]
    assert weights_unchanged and step == wrapper["trained_step"] > 0 and same_state
    assert said[0].startswith("A total of 2 objects could not be loaded")


def test_a_load_weights_that_raises_has_loaded_the_optimizer_state_already(wrapper):
    """Section 1 and 2: Keras loads every object it can, collects the failures and raises at the end
    (_raise_loading_failure, after the walk over the file), so the ValueError comes after the optimizer's state
    was loaded."""
    from keras.src.saving import saving_lib

    first_line, step, same_state = wrapper["raised"]
    assert first_line.startswith("A total of 2 objects could not be loaded")
    assert step == wrapper["trained_step"] and same_state
    source = inspect.getsource(saving_lib.load_weights_only)
    assert source.index("_load_state(") < source.index("_raise_loading_failure(")
    assert "failed_saveables.add(" in inspect.getsource(saving_lib._load_state)


def test_load_verified_refuses_the_wrappers_file_and_puts_the_optimizer_state_back(wrapper):
    """Section 2: all or nothing, the optimizer's state included, whether the model's Adam was built or fresh."""
    for built in (True, False):
        assert wrapper[f"verified refused, optimizer built {built}"] == [True, True, True, 0], built


LIMITS = """
    import json, os, tempfile, warnings, numpy as np, gputrain_kit as kit
    from unittest import mock
    kit.setup(devices=1)
    import keras
    d = tempfile.mkdtemp(); (x, y), _ = kit.data.digits()
    def mk(optimizer="adam", build=False):
        m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu", name="hidden"),
                              keras.layers.Dense(10, name="logits")])
        if optimizer is None:
            return m
        m.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        if build:
            m.optimizer.build(m.trainable_variables)
        return m
    trained = mk(); trained.fit(x, y, batch_size=128, epochs=1, verbose=0)
    path = kit.save_verified(trained, os.path.join(d, "trained.weights.h5"))
    out = {"step": int(trained.optimizer.iterations)}
    state = lambda m: [v.numpy() for v in m.optimizer.variables]
    same = lambda a, b: len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b))
    for name in ("adamw", "sgd"):
        m = mk(name)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                kit.load_verified(m, path)
                out[name] = ["loaded", type(m.optimizer).__name__, int(m.optimizer.iterations),
                             same(state(m), state(trained)), len(caught)]
            except kit.saving.LoadError as e:
                out[name] = ["refused", str(e)]
    busy = mk(); kit.load_verified(busy, path)                     # its Adam at the trained step
    untrained = mk(None); untrained_path = kit.save_verified(untrained, os.path.join(d, "untrained.weights.h5"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kit.load_verified(busy, untrained_path)
    out["weights_only"] = [int(busy.optimizer.iterations), same(state(busy), state(trained)),
                           same(busy.get_weights(), untrained.get_weights()), len(caught)]

    # save_verified compares the optimizer's variables it wrote: a wrong step counter is refused
    newer = mk(build=True); safe = kit.save_verified(trained, os.path.join(d, "safe.weights.h5"))
    def wrong_step(store):
        variables = newer.optimizer.variables
        store["0"] = np.int64(int(variables[0]) + 1)
        for i, v in enumerate(variables[1:], start=1):
            store[str(i)] = v.numpy()
    with mock.patch.object(newer.optimizer, "save_own_variables", wrong_step):
        try:
            kit.save_verified(newer, safe); out["wrong_step"] = None
        except kit.saving.SaveError as e:
            out["wrong_step"] = str(e)
    kept = mk(); kit.load_verified(kept, safe)
    out["safe_kept"] = [int(kept.optimizer.iterations), same(kept.get_weights(), trained.get_weights())]
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def limits():
    return last_json(run_python(LIMITS))


def test_load_verified_matches_optimizer_state_by_shapes_not_by_class(limits):
    """Section 2, 'Not checked': Adam's state loads into AdamW (same slots) without a word; SGD's two variables
    do not fit Adam's ten and are refused."""
    assert limits["adamw"] == ["loaded", "AdamW", limits["step"], True, 0]
    assert limits["sgd"][0] == "refused" and "does not fit the model's optimizer" in limits["sgd"][1]


def test_a_file_without_optimizer_state_leaves_the_models_optimizer_as_it_was(limits):
    """Section 2, 'Not checked': untrained weights from a file without optimizer state load, and the model's
    Adam keeps the trained step and moments, with no warning."""
    assert limits["weights_only"] == [limits["step"], True, True, 0]


def test_save_verified_compares_the_optimizer_variables_it_wrote(limits):
    """Section 5: a wrong step counter written by the optimizer's save is a SaveError naming it; the previous file
    is left as it was."""
    assert "did not read back identically" in limits["wrong_step"]
    assert "1 different" in limits["wrong_step"] and "iteration" in limits["wrong_step"]
    assert limits["safe_kept"] == [limits["step"], True]


BATCHES = """
    import json, os, tempfile, numpy as np, gputrain_kit as kit
    kit.setup(devices=1)
    import keras
    d = tempfile.mkdtemp()
    x = np.random.default_rng(0).normal(size=(48, 4)).astype("float32"); y = x.sum(axis=1, keepdims=True)
    fit = dict(batch_size=8, epochs=3, shuffle=False, verbose=0)
    class Crash(RuntimeError):
        pass
    class CrashAtBatch(keras.callbacks.Callback):
        def __init__(self, epoch, batch):
            super().__init__(); self.at, self.epoch = (epoch, batch), None
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
        def on_train_batch_begin(self, batch, logs=None):
            if (self.epoch, batch) == self.at:
                raise Crash()
    def tiny():
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        m.compile("sgd", "mse", run_eagerly=True); return m
    straight = tiny(); straight.fit(x, y, **fit)
    out = {"straight": int(straight.optimizer.iterations)}
    for key, (epoch, batch, freq) in {"mid": (1, 3, 2), "boundary": (1, 0, 2), "epoch": (1, 3, "epoch")}.items():
        backup = os.path.join(d, key); crashed = tiny()
        try:
            crashed.fit(x, y, **fit, callbacks=[keras.callbacks.BackupAndRestore(backup, save_freq=freq),
                                                CrashAtBatch(epoch, batch)])
        except Crash:
            pass
        with open(os.path.join(backup, "training_metadata.json")) as f:
            meta = json.load(f)
        resumed, seen = tiny(), {"epochs": []}
        record = keras.callbacks.LambdaCallback(
            on_train_begin=lambda logs: seen.update(restored=int(resumed.optimizer.iterations)),
            on_epoch_begin=lambda e, logs: seen["epochs"].append(e + 1))
        resumed.fit(x, y, **fit, callbacks=[keras.callbacks.BackupAndRestore(backup, save_freq=freq), record])
        identical = all(a.tobytes() == b.tobytes() for a, b in zip(straight.get_weights(), resumed.get_weights()))
        out[key] = {"meta": meta, "crashed": int(crashed.optimizer.iterations), "restored": seen["restored"],
                    "epochs": seen["epochs"], "applied": int(resumed.optimizer.iterations), "identical": identical}
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def batches():
    return last_json(run_python(BATCHES))


def test_backup_and_restore_reads_the_epoch_and_never_the_batch():
    """Section 5: the restart sets the initial epoch from the metadata's "epoch"; the "batch" it writes is unused."""
    from keras.src.callbacks.backup_and_restore import BackupAndRestore

    load = inspect.getsource(BackupAndRestore._load_model)
    assert 'training_metadata["epoch"]' in load
    assert 'training_metadata["batch"]' not in load and '"batch")' not in load     # neither [...] nor .get(...)
    assert '"batch": self._last_batch_seen' in inspect.getsource(BackupAndRestore._save_model)


def test_save_freq_restarts_the_unfinished_epoch_at_batch_0_on_a_mid_epoch_backup(batches):
    """Section 5: 6 batches an epoch, save_freq=2, crash before batch 4 of epoch 2 (1-based): the backup after
    batch 2 of epoch 2 (step 8) is restored, epoch 2 runs again from batch 1: 2 batches applied twice."""
    mid = batches["mid"]
    assert batches["straight"] == 18
    assert mid["meta"] == {"epoch": 1, "batch": 1} and mid["crashed"] == 9 and mid["restored"] == 8
    assert mid["epochs"] == [2, 3] and mid["applied"] == 20 and not mid["identical"]


def test_save_freq_backup_after_an_epochs_last_batch_replays_that_whole_epoch(batches):
    """Section 5: a crash at the start of epoch 2: epoch 1's last backup was written after its last batch, before
    the epoch counted as finished ('epoch': 0), so the restart runs all of epoch 1 again (6 applied twice)."""
    boundary = batches["boundary"]
    assert boundary["meta"] == {"epoch": 0, "batch": 5} and boundary["restored"] == 6
    assert boundary["epochs"] == [1, 2, 3] and boundary["applied"] == 24 and not boundary["identical"]


def test_save_freq_saves_no_batches_after_a_restart(batches):
    """Section 5: a restart runs the whole unfinished epoch again whatever save_freq is: 12 batches after the
    mid-epoch backup (save_freq=2) as after the epoch-end one (save_freq="epoch"), and 18 after the backup written
    after epoch 1's last batch, where backups at epoch ends would have run 12. Only the restored step differs."""
    ran = {key: batches[key]["applied"] - batches[key]["restored"] for key in ("mid", "boundary", "epoch")}
    assert ran == {"mid": 12, "boundary": 18, "epoch": 12}
    assert batches["mid"]["restored"] > batches["epoch"]["restored"]         # further on, its batches applied twice


def test_save_freq_epoch_loses_the_partial_epoch_and_resumes_bit_for_bit(batches):
    """Section 5: the default backs up at epoch ends: the crash inside epoch 2 loses its 3 batches, which the
    restart does once more; no batch is applied twice, and the weights match the uninterrupted run."""
    epoch = batches["epoch"]
    assert epoch["meta"]["epoch"] == 1 and epoch["crashed"] == 9 and epoch["restored"] == 6
    assert epoch["epochs"] == [2, 3] and epoch["applied"] == 18 and epoch["identical"]


DROPOUT = """
    import json, os, tempfile, h5py, numpy as np, gputrain_kit as kit
    kit.setup(devices=1)
    import keras
    from tensorflow.python.framework.config import is_op_determinism_enabled
    d = tempfile.mkdtemp()
    x = np.random.default_rng(0).normal(size=(48, 4)).astype("float32"); y = x.sum(axis=1, keepdims=True)
    fit = dict(batch_size=8, epochs=2, shuffle=False, verbose=0)
    class Crash(RuntimeError):
        pass
    class CrashAtEpoch(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 1:
                raise Crash()
    def model(rate):
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dropout(rate), keras.layers.Dense(1)])
        m.compile("sgd", "mse", run_eagerly=True); return m
    out = {"determinism": is_op_determinism_enabled()}
    for rate in (0.3, 0.0):
        straight = model(rate); straight.fit(x, y, **fit)
        backup = os.path.join(d, str(rate))
        try:
            model(rate).fit(x, y, **fit, callbacks=[keras.callbacks.BackupAndRestore(backup), CrashAtEpoch()])
        except Crash:
            pass
        resumed = model(rate); resumed.fit(x, y, **fit, callbacks=[keras.callbacks.BackupAndRestore(backup)])
        out[str(rate)] = all(a.tobytes() == b.tobytes() for a, b in zip(straight.get_weights(), resumed.get_weights()))
        if rate:
            with_dropout = straight
    layer = with_dropout.layers[1]
    with_dropout.save_weights(os.path.join(d, "dropout.weights.h5"))
    with h5py.File(os.path.join(d, "dropout.weights.h5"), "r") as f:
        out["in_file"] = len(f["layers/dropout/vars"])
    out["variables"] = [v.path.rsplit("/", 1)[-1] for v in layer.variables]
    out["weights"] = len(layer.weights)
    print(json.dumps(out))
"""


def test_a_resume_with_dropout_is_not_bit_for_bit_because_its_random_state_is_not_saved():
    """Section 5: the epoch-end recipe that resumes bit for bit fails with Dropout(0.3) (its seed generator's state
    is a variable, not a weight, so neither the file nor the backup holds it) and holds with Dropout(0.0), which
    draws nothing; kit.setup turned op determinism on."""
    out = last_json(run_python(DROPOUT))
    assert out["0.3"] is False and out["0.0"] is True
    assert out["variables"] == ["seed_generator_state"] and out["weights"] == 0 and out["in_file"] == 0
    assert out["determinism"] is True


def test_a_layer_saves_only_its_weights_not_its_seed_generators_state():
    """Section 5: Layer.save_own_variables writes the trainable and non-trainable weights; a seed generator's state
    is only in .variables."""
    import keras
    from keras.src.layers.layer import Layer

    assert "self._trainable_variables + self._non_trainable_variables" in inspect.getsource(Layer.save_own_variables)
    layer = keras.layers.Dropout(0.5)
    assert layer.weights == [] and [v.name for v in layer.variables] == ["seed_generator_state"]


HDF5 = """
    import json, logging, os, tempfile, h5py, numpy as np, gputrain_kit as kit
    kit.setup(devices=1)
    import keras
    logging.getLogger("absl").setLevel(logging.ERROR)
    d = tempfile.mkdtemp()
    out = {}
    names = np.array([(f"layer_{i:04d}_" + "x" * 110).encode() for i in range(600)])   # the notebook's 600 names
    with h5py.File(os.path.join(d, "one.h5"), "w") as f:
        try:
            f.attrs["layer_names"] = names; out["one_attribute"] = None
        except OSError as e:
            out["one_attribute"] = str(e)
    out["nbytes"] = int(names.nbytes)
    with h5py.File(os.path.join(d, "default.h5"), "w") as f:
        out["default libver"] = f.libver[0]
    for libver in ("earliest", "v108", "latest"):       # the format of HDF5 1.8+ stores large attributes densely
        try:
            with h5py.File(os.path.join(d, f"{libver}.h5"), "w", libver=libver) as f:
                f.attrs["layer_names"] = names
            with h5py.File(os.path.join(d, f"{libver}.h5"), "r") as f:
                out[libver] = bool(np.array_equal(f.attrs["layer_names"], names))
        except OSError as e:
            out[libver] = str(e)
    # a few layers with long names: the optimizer's list of weight names is over 64 KB, and is split
    wide = keras.Sequential([keras.Input((4,))]
                            + [keras.layers.Dense(4, name=f"l{i}_" + "x" * 2000) for i in range(10)])
    wide.compile(optimizer="adam", loss="mse"); wide.optimizer.build(wide.trainable_variables)
    wide.save(os.path.join(d, "wide.h5"))
    with h5py.File(os.path.join(d, "wide.h5"), "r") as f:
        attrs = f["optimizer_weights"].attrs
        out["optimizer_chunks"] = {k: [len(attrs[k]), int(attrs[k].nbytes)] for k in attrs}
    out["optimizer_variables"] = len(wide.optimizer.variables)
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def hdf5():
    return last_json(run_python(HDF5))


def test_a_large_models_layer_names_in_one_fixed_length_attribute_are_over_hdf5s_limit(hdf5):
    """Section 6: what the Keras of 2017 did (keras-team/keras#5253): the 600 names in one attribute fail."""
    assert hdf5["nbytes"] == 600 * 121 > 64 * 1024
    assert "object header message is too large" in hdf5["one_attribute"]


def test_the_limit_holds_in_h5pys_default_format_which_kerass_legacy_writer_uses(hdf5):
    """Section 6 (issue 44): h5py's default format is libver='earliest', where attributes live in the object
    header; with 'v108' or 'latest' the same 72,600-byte attribute saves (dense attribute storage). Keras's legacy
    writer opens its file without a libver."""
    from keras.src.legacy.saving import legacy_h5_format

    assert hdf5["default libver"] == "earliest"
    assert "object header message is too large" in hdf5["earliest"]
    assert hdf5["v108"] is True and hdf5["latest"] is True
    source = inspect.getsource(legacy_h5_format.save_model_to_hdf5)
    assert 'h5py.File(filepath, mode="w")' in source and "libver" not in source


def test_todays_legacy_writer_splits_the_optimizers_weight_names_too(hdf5):
    """Section 6 (and keras-team/keras#11104): the optimizer's weight names, over 64 KB in all, are saved in
    numbered chunks, each under Keras's limit of 64512 bytes; the layer names are chunked in test_nb04_claims."""
    from keras.src.legacy.saving import legacy_h5_format

    chunks = hdf5["optimizer_chunks"]
    limit = legacy_h5_format.HDF5_OBJECT_HEADER_LIMIT
    assert sorted(chunks) == [f"weight_names{i}" for i in range(len(chunks))] and len(chunks) >= 2
    assert all(nbytes <= limit for _, nbytes in chunks.values())
    assert sum(n for n, _ in chunks.values()) == hdf5["optimizer_variables"]
    source = inspect.getsource(legacy_h5_format)
    for call in ('save_attributes_to_hdf5_group(\n        group,\n        "layer_names"',
                 'save_attributes_to_hdf5_group(group, "weight_names"',
                 'save_attributes_to_hdf5_group(\n            weights_group, "weight_names"'):
        assert call.replace(" ", "").replace("\n", "") in source.replace(" ", "").replace("\n", "")
