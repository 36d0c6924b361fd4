"""Why each slow cell of the course takes the time it does (`make bench` prints these next to the times).

A cell is listed by its notebook's number and the start of its first line. Each reason says what the
cell computes, and why its claim needs that much: the model, epochs and data are already the smallest
that show what the prose says. A cell over 2 s without a reason here is shown as "no reason recorded":
add one, or make the cell cheaper.
"""
from __future__ import annotations

SETUP = ("`kit.setup()`: imports TensorFlow and Keras and splits the CPU into devices; the floor's own cost, "
         "paid once per notebook")

REASONS: dict[tuple[str, str], str] = {
    ("00", "import subprocess, sys"): "`gputrain_kit doctor --quick` in a new process, as a learner runs it: it "
                                      "imports TensorFlow there",
    ("00", "import re"): "`jit_compile=True` under MirroredStrategy in a new process (TensorFlow imported there, "
                         "about 4 s): this kernel's op determinism would turn XLA off instead of showing the failure",
    ("01", "strategy = tf.distribute.MirroredStrategy"): "the first fit under MirroredStrategy on 4 devices: the "
        "training and validation steps are traced once per replica; 2 epochs, as the plain model before it",
    ("01", "for probe in kit.counting.probe_locks():"): "4 processes, forked one after another from one "
        "that imported TensorFlow: whether a call locks the device configuration shows only first thing in a "
        "process, so each starts TensorFlow's runtime anew",
    ("02", 'print("training 2 epochs on 4 replicas, then reading'): "2 epochs on 4 replicas, then the copies "
        "compared: tracing the step for 4 replicas is most of it",
    ("02", 'print("training 70 samples one epoch on 4 replicas'): "one epoch of 2 steps on 4 replicas and on one "
        "device, every step's update recorded: two new models, each step traced (for 4 replicas, then for one)",
    ("01", 'print("recording one epoch of 512 samples'): "one epoch (8 steps) of the 4-replica model under "
        "TensorFlow's profiler, which records every op's device and time, then the timeline drawn",
    ("02", "import logging"): "4 strategies, each a new model traced and "
        "trained one epoch on 256 samples: the claim is that each reduction trains (or fails) here",
    ("02", "child = kit.processes.run_child("): "a new process (TensorFlow imported there) with two strategies "
        "of different sizes: the collision aborts every collective in a process, so not in this kernel",
    ("02", "def one_step(cross_device_ops):"): "two new 2-device models, each traced and then profiled for one "
        "step, for the two timelines",
    ("02", "s = tf.distribute.MirroredStrategy(kit.device_names(2))"): "a fresh 2-device model's first fit, with "
        "every reduction recorded, then one traced step: which op ran each reduction shows only in a real fit",
    ("01", "if report.mode == \"gpu\":"): "a fresh process imports TensorFlow to show that an unsplit CPU is "
        "refused too",
    ("02", "print(\"training the digits model on 1, then 4"): "throughput of 2 epochs on 1 and on 4 replicas: the 2018 post's first "
        "conclusion, measured",
    ("02", "print(\"training at global batch 32, then 512"): "5 epochs at batch 32 (225 steps) and at 512: the accuracy gap needs "
        "the same epochs for both",
    ("02", "callbacks = ["): "a two-output model with four callbacks (and a line per epoch) under 4 replicas; EarlyStopping ends it "
        "after 3 epochs, the fewest that show both ReduceLROnPlateau and EarlyStopping acting",
    ("03", "branch_1, branch_2, merge"): "5 epochs with validation on three devices: the accuracy shows the "
        "placed model trains",
    ("03", "from gputrain_kit.measure import measure_training_step"): "3 models' training steps measured "
        "with TensorFlow's allocator, the largest at batch 8192: the estimate's error needs a real step",
    ("04", "four = kit.training.strategy_for(4)"): "3 epochs on 4 replicas, the model saved, loaded twice "
        "and trained 2 more epochs on 2 replicas: each load traces new steps",
    ("04", "x_check, y_check = x_val[:256], y_val[:256]"): "3 epochs on 4 replicas with validation, ModelCheckpoint "
        "saving each better epoch, the best reloaded and evaluated: the stock callback's claim needs a few "
        "epochs to choose from",
    ("04", "def string_kind(attrs, key):"): "a 600-layer model saved to .h5: the configuration must exceed "
        "HDF5's 64 KB attribute limit for the claim",
    ("05", "model, history = train(None"): "the trap itself: one epoch on 4 replicas, first trace of the step; "
        "from here to section 5 the BatchNorm cases train beside the kernel, cores less one at a time (on 2 "
        "cores, two)",
    ("05", "def summarize(m):"): "the drop_remainder fix trained (one epoch, 4 replicas), its replica copies "
        "read and its predictions made under the strategy",
    ("05", 'trained = {None: model, "drop_remainder": drifted}'): "the repeat, pad and synchronized fixes trained "
        "(one epoch each, 4 replicas, the seed of the trap), every model's replica copies read, and predictions "
        "made under the strategy where a copy holds NaN; the trap and drop_remainder are reused from above",
    ("05", "def moving_copies(m):"): "evaluate and predict on the drifted model under the strategy, every "
        "replica's copy of the statistics read before and after: the claim needs both calls",
    ("05", "with kit.expect_error(kit.ReplicaHealthError"): "a new model on the trap under ReplicaHealth, which "
        "stops it at the end of the first epoch: the step traced again for 4 replicas",
    ("05", "matrix = pending.result()"): "waits for the 8 BatchNorm cases started in section 1: the conv net's 4 "
        "cases under each CPU kernel family (the Dense net's are this kernel's own trainings), one process per family that imported TensorFlow once (the family is fixed at "
        "import), each case forked from it, 2 epochs each: 2 epochs show the loss turning NaN in "
        "epoch 2; cores less one at a time until this cell, which gives them every core (on 2 cores: two throughout)",
    ("06", "from gputrain_kit.lrscaling import batch_sweep"): "4 trainings of 10 epochs (batches 32 to 1024) "
        "on one device: 10 epochs is where the large batches' accuracy gap is clear",
    ("06", "print(f\"training {2 * len(batches)} models"): "8 more trainings of 10 epochs, with the scaled rate with and without "
        "warm-up",
    ("06", "seeds, warmups = (0, 1, 2)"): "batch 1024 on two more random seeds (the same rate, then rate 1.6 with "
        "0, 1 and 5 epochs of warm-up) and a 5-epoch warm-up on the first: 9 trainings of 10 epochs at 2 steps "
        "each; one seed would teach that seed's luck",
    ("07", "run = kit.launch_local_workers(train_worker"): "the first launch: the process the workers are forked "
        "from imports TensorFlow once (later launches with the same environment reuse it), then 2 workers join "
        "the cluster and train 30 steps",
    ("07", "import os"): "2 workers with tf-keras: TF_USE_LEGACY_KERAS is read when TensorFlow is imported, so "
        "this environment needs its own import; Keras 3's failing fit, tf-keras's fit and its relaunch",
    ("07", "checkpoints = tempfile.mkdtemp("): "back to the default environment, so one more import to fork "
        "from; 2 workers train until worker 1's simulated crash",
    ("07", "resumed = kit.launch_local_workers("): "2 new workers that resume from the checkpoint",
    ("07", 'print("worker 1 dies after one all-reduce'): "2 workers, then worker 0 waits until TensorFlow's "
        "coordination service misses worker 1's heartbeats: that wait is the claim",
    ("07", "def interfaces():"): "2 workers in their private network namespace, listing their interfaces",
    ("08", "print(\"collecting section 1"): "waits for the memory measurements started in section 1: each "
        "configuration's training steps measured in a process of its own, forked from one that imported "
        "TensorFlow once",
    ("08", "print(\"collecting the measurements under both kernel families"): "waits for float32 and mixed_bfloat16 measured under each CPU "
        "kernel family (the families one after another, each in processes of its own, which import TensorFlow: "
        "the family is fixed at import), 4 measured steps each",
}


def reason(notebook: str, first_line: str) -> str | None:
    """Why a cell of ``notebook`` (a name starting with its two digits) that starts with ``first_line`` is slow."""
    if first_line.startswith("import gputrain_kit as kit"):
        return SETUP
    number = notebook[:2]
    for (nb, start), why in REASONS.items():
        if nb == number and first_line.startswith(start):
            return why
    return None
