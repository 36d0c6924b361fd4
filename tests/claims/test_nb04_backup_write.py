"""Notebook 04, section 5 (issue 44): a crash during BackupAndRestore's own write.

BackupAndRestore writes its one backup, latest.weights.h5, with save_weights straight into the file. A process
killed during that write leaves a file the restart cannot open (OSError), and the restart fails; with
double_checkpoint=True the restart falls back to the previous backup (latest.weights.h5.bkp) and resumes. The
fallback catches an OSError only: a write that raised (a full disk) closes a file that opens and lacks a layer
(ValueError), and the restart fails until the .bkp files are copied back by hand.

The notebook stands a kill in with a copy of the file's bytes taken during the write; the real kill here (a
process that ends with os._exit in the middle of the write) gives the same outcomes. Then the notebook's prose:
issue 44's corrected sentences are there, the wrong ones gone.
"""
from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from conftest import ROOT, last_json, run_python

TINY = """
    import gc, json, os, re, shutil, sys, warnings
    import numpy as np
    import keras
    x = np.random.default_rng(0).normal(size=(48, 4)).astype("float32"); y = x.sum(axis=1, keepdims=True)
    fit = dict(batch_size=8, epochs=3, shuffle=False, verbose=0)

    def tiny():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
        return model

    def restart(backup, double):
        resumed, epochs = tiny(), []
        record = keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs: epochs.append(epoch + 1))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                resumed.fit(x, y, **fit, callbacks=[keras.callbacks.BackupAndRestore(backup, double_checkpoint=double),
                                                    record])
        except (OSError, ValueError) as err:
            return [type(err).__name__, str(err)[:200]]
        straight = tiny(); straight.fit(x, y, **fit)
        same = all(a.tobytes() == b.tobytes() for a, b in zip(straight.get_weights(), resumed.get_weights()))
        return [epochs, int(resumed.optimizer.iterations), same]
"""

# A real kill: the process ends in the middle of the backup's write at the end of epoch 2, as e04d.py did
KILLED = TINY + """
    backup, double = os.environ["BACKUP"], os.environ["DOUBLE"] == "1"
    class Kill(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                self.model.layers[-1].save_own_variables = lambda store: os._exit(9)
    tiny().fit(x, y, **fit, callbacks=[Kill(), keras.callbacks.BackupAndRestore(backup, double_checkpoint=double)])
    print("not killed")
"""

RESTART = TINY + """
    files = sorted(os.listdir(os.environ["BACKUP"]))        # before the restart: a fit that ends deletes the folder
    print(json.dumps({"restart": restart(os.environ["BACKUP"], os.environ["DOUBLE"] == "1"), "files": files}))
"""

# The notebook's way: the bytes on disk during the write stand for the killed process's file; a write that raises
NOTEBOOK = TINY + """
    class Stop(RuntimeError):
        pass

    def crash(killed, double):
        backup = os.path.join(os.environ["OUT"], f"nb-{killed}-{double}")
        latest = os.path.join(backup, "latest.weights.h5")
        def stop(store):
            if killed:
                shutil.copy(latest, latest + ".at-kill")
            raise Stop()
        class During(keras.callbacks.Callback):
            def on_epoch_end(self, epoch, logs=None):
                if epoch == 1:
                    self.model.layers[-1].save_own_variables = stop
        try:
            tiny().fit(x, y, **fit, callbacks=[During(), keras.callbacks.BackupAndRestore(backup, double_checkpoint=double)])
        except Stop:
            pass
        gc.collect()
        if killed:
            os.replace(latest + ".at-kill", latest)
        return backup

    out = {"killed default": restart(crash(True, False), False), "killed double": restart(crash(True, True), True)}
    backup = crash(False, True)
    out["raised double"] = restart(backup, True)
    for name in ("latest.weights.h5", "training_metadata.json"):
        shutil.copy(os.path.join(backup, name + ".bkp"), os.path.join(backup, name))
    out["raised double, copied back"] = restart(backup, True)
    print(json.dumps(out))
"""


def _killed_then_restarted(folder: Path, double: bool) -> dict:
    backup = folder / f"killed-{int(double)}"
    env = {"BACKUP": str(backup), "DOUBLE": str(int(double))}
    killed = run_python(KILLED, env=env, check=False)
    assert killed.returncode == 9 and "not killed" not in killed.stdout, (killed.returncode, killed.stderr[-2000:])
    return last_json(run_python(RESTART, env=env))


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    folder = tmp_path_factory.mktemp("backup_kill")
    return {double: _killed_then_restarted(folder, double) for double in (False, True)}


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    return last_json(run_python(NOTEBOOK, env={"OUT": str(tmp_path_factory.mktemp("backup_nb"))}))


def test_a_kill_during_the_backups_write_leaves_a_backup_the_restart_cannot_open(real, notebook):
    kind, said = real[False]["restart"]
    assert kind == "OSError" and "Unable to synchronously open file" in said
    assert real[False]["files"] == ["latest.weights.h5", "training_metadata.json"]      # no .bkp to fall back to
    assert notebook["killed default"][0] == "OSError"
    assert notebook["killed default"][1].startswith("Unable to synchronously open file")


def test_double_checkpoint_falls_back_to_the_previous_backup_and_resumes_bit_for_bit(real, notebook):
    # the backup of epoch 1's end: the restart trains epochs 2 and 3, 12 batches after the 6 restored
    assert real[True]["restart"] == [[2, 3], 18, True]
    assert {"latest.weights.h5.bkp", "training_metadata.json.bkp"} <= set(real[True]["files"])
    assert notebook["killed double"] == [[2, 3], 18, True]


def test_a_write_that_raised_is_no_oserror_and_needs_the_bkp_files_copied_back(notebook):
    kind, said = notebook["raised double"]
    assert kind == "ValueError" and said.startswith("A total of 1 objects could not be loaded")
    assert notebook["raised double, copied back"] == [[2, 3], 18, True]


def test_the_keras_source_writes_in_place_and_falls_back_on_an_oserror_only():
    """_save_model copies the last backup to .bkp (double_checkpoint) and then calls save_weights on the backup's
    own path; on_train_begin catches OSError, copies the .bkp files back and loads again."""
    from keras.src.callbacks import backup_and_restore

    save = inspect.getsource(backup_and_restore.BackupAndRestore._save_model)
    assert save.index("file_utils.copy(self._weights_path, self._prev_weights_path)") < save.index(
        "self.model.save_weights(filepath=self._weights_path, overwrite=True)")
    begin = inspect.getsource(backup_and_restore.BackupAndRestore.on_train_begin)
    assert re.search(r"except OSError as \w+:", begin) and "except ValueError" not in begin
    assert "file_utils.copy(self._prev_weights_path, self._weights_path)" in begin


def _prose() -> str:
    cells = json.loads((ROOT / "notebooks" / "04_saving_loading.ipynb").read_text(encoding="utf-8"))["cells"]
    return re.sub(r"\s+", " ", " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"))


def test_the_prose_says_what_issue_44_found():
    prose = _prose()
    for wrong in ("and nothing is loaded", "loads nothing with only a warning"):
        assert wrong not in prose, wrong
    for said in ("becomes a warning, and no weight is loaded. The optimizer's state, though, is loaded where it fits",
                 "so a `load_weights` that raises has changed the model already",
                 "`skip_mismatch=True` turns the failure into a warning: of the wrapper's file it loads no weight into the "
                 "template (none sits where the template looks), but it loads the file's optimizer state where it fits",
                 "unless the crash hits the backup's own write",
                 "`BackupAndRestore(backup_dir, double_checkpoint=True)`",
                 "which catches an `OSError` only",
                 "in the file format h5py writes by default, which Keras's legacy writer uses",
                 "`libver=\"latest\"` stores large attributes apart"):
        assert said in prose, said
