"""Exercise checks: ``gputrain_kit.check.<exercise>(answer)`` says whether an answer is right.

Each check returns a ``Verdict`` (truthy when correct) whose repr is one plain
sentence, with a hint when the answer is wrong. ``...`` means "not answered yet".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Verdict", "nb00_last_device", "nb00_simulated_speedup", "nb00_more_devices",
           "nb01_physical_behind", "nb01_count_with_garbage", "nb01_locking_call",
           "nb02_per_replica", "nb02_steps_per_epoch", "nb02_last_step", "nb03_less_memory", "nb03_bubble",
           "nb04_what_to_save", "nb04_reshuffle", "nb05_empty_replicas_a", "nb05_empty_replicas_b",
           "nb05_identical_copies", "nb06_scaled_lr", "nb06_efficiency",
           "nb07_tf_config", "nb07_global_batch", "nb07_resume_step"]


@dataclass(frozen=True)
class Verdict:
    correct: bool
    message: str

    def __bool__(self) -> bool:
        return self.correct

    def __repr__(self) -> str:
        return self.message


def _verdict(answer: Any, correct: bool, right: str, hint: str) -> Verdict:
    if answer is Ellipsis:
        return Verdict(False, "Not answered yet: replace ... with your answer and run the cell again.")
    if correct:
        return Verdict(True, f"Correct. {right}")
    return Verdict(False, f"Not yet. {hint}")


def _norm_device(name: str) -> str:
    name = name.strip().lower()
    for prefix in ("/device:", "/job:localhost/replica:0/task:0/device:"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name.lstrip("/")


# --- notebook 00 -------------------------------------------------------------------------------

def nb00_last_device(answer: Any) -> Verdict:
    """The name of the last device that setup() created in this kernel."""
    from .devices import device_names

    last = device_names()[-1]
    ok = isinstance(answer, str) and _norm_device(answer) == _norm_device(last)
    return _verdict(answer, ok, f"setup() made {last}; strategies use these names.",
                    "Look at the 'devices:' line of the setup report, or call device_names().")


def nb00_simulated_speedup(answer: Any) -> Verdict:
    """Would 4 simulated devices train 4x faster than 1? (True/False)"""
    ok = answer is False
    return _verdict(answer, ok,
                    "Logical CPUs share the same cores: they show how work is split, not speed.",
                    "Answer True or False. Where does each logical CPU's arithmetic actually run?")


def nb00_more_devices(answer: Any) -> Verdict:
    """After setup(devices=2), how do you get 4 devices? 'a' call setup(devices=4),
    'b' restart the kernel then setup(devices=4), 'c' set CUDA_VISIBLE_DEVICES."""
    ok = isinstance(answer, str) and answer.strip().lower() == "b"
    return _verdict(answer, ok,
                    "Devices are fixed once TensorFlow initialises them: only a new process changes them.",
                    "Answer 'a', 'b' or 'c'. Try (a) in a cell: what does setup() say?")


# --- notebook 01 -------------------------------------------------------------------------------

def nb01_physical_behind(answer: Any) -> Verdict:
    """With CUDA_VISIBLE_DEVICES=3,1 on an 8-GPU server, which physical GPU is TensorFlow's /GPU:1?"""
    from .visibility import parse_cuda_visible_devices

    right = parse_cuda_visible_devices("3,1", 8).physical_of(1)
    ok = _is_int(answer) and answer == right
    return _verdict(answer, ok, f"/GPU:{1} is physical GPU {right}: visible devices are renumbered in list order.",
                    "Give a physical GPU number. Visible devices are renumbered in the order they are listed.")


def nb01_count_with_garbage(answer: Any) -> Verdict:
    """How many GPUs does a process see with CUDA_VISIBLE_DEVICES=0,1,x,2 on an 8-GPU server?"""
    from .visibility import parse_cuda_visible_devices

    right = parse_cuda_visible_devices("0,1,x,2", 8).count
    ok = _is_int(answer) and answer == right
    return _verdict(answer, ok, f"{right}: parsing stops at 'x', so GPU 2 is never reached.",
                    "Give a number. What does the runtime do when it meets an entry that is not a number?")


def nb01_locking_call(answer: Any) -> Verdict:
    """Which call locks the device configuration: 'a' list_physical_devices(), 'b' list_logical_devices(),
    'c' device_lib.list_local_devices()?"""
    ok = isinstance(answer, str) and answer.strip().lower() == "b"
    return _verdict(answer, ok, "list_logical_devices() initialises the runtime; configure devices before it.",
                    "Answer 'a', 'b' or 'c'. Look at the probe table above.")


def _is_int(answer: Any) -> bool:
    return isinstance(answer, int) and not isinstance(answer, bool)


# --- notebook 02 -------------------------------------------------------------------------------

def nb02_per_replica(answer: Any) -> Verdict:
    """Global batch 256 on 4 GPUs: how many samples does each replica get per step?"""
    from .batching import split_batch

    right = split_batch(256, 4)[0]
    ok = _is_int(answer) and answer == right
    return _verdict(answer, ok, f"{right}: the global batch is split across the replicas.",
                    "Give a number: global batch = per-replica batch x replicas.")


def nb02_steps_per_epoch(answer: Any) -> Verdict:
    """1438 training samples, global batch 256, 4 replicas: how many steps in one epoch (no drop_remainder)?"""
    from .batching import plan_batches

    right = len(plan_batches(1438, 256, 4))
    ok = _is_int(answer) and answer == right
    return _verdict(answer, ok, f"{right}: five full steps and a partial one. Steps depend on the global batch, "
                    "not on the replica count.", "Give a number. Divide, then round which way?")


def nb02_last_step(answer: Any) -> Verdict:
    """...and how is that last step split over the 4 replicas? (a list of 4 numbers)"""
    from .batching import plan_batches

    right = plan_batches(1438, 256, 4)[-1]
    ok = isinstance(answer, (list, tuple)) and [a for a in answer] == right
    return _verdict(answer, ok, f"{right}: ceil(158 / 4) = 40 per replica, filled in order.",
                    "Give a list like [a, b, c, d]. The last step has 1438 - 5 x 256 samples; "
                    "each replica takes ceil(samples / 4) in turn.")


# --- notebook 03 -------------------------------------------------------------------------------

def nb03_less_memory(answer: Any) -> Verdict:
    """Dense stack 24 x 8192, batch 32, Adam: fullest device smaller with 'data' x4 or 'split' x2?"""
    from .memory import estimate_memory, preset_profile

    profile = preset_profile("Dense stack 24 x 8192 (1.6B parameters)")
    peaks = {s: estimate_memory(profile, batch_size=32, strategy=s, devices=d).peak
             for s, d in (("data", 4), ("split", 2))}
    right = min(peaks, key=peaks.get)
    ok = isinstance(answer, str) and answer.strip().lower() == right
    return _verdict(answer, ok, f"'{right}': {peaks['data'] / 1e9:.1f} GB for data x4 vs "
                    f"{peaks['split'] / 1e9:.1f} GB for split x2 on the fullest device.",
                    "Answer 'data' or 'split'. Which strategy copies the whole model state onto every device?")


def nb03_bubble(answer: Any) -> Verdict:
    """Idle fraction with 4 pipeline stages and 8 micro-batches."""
    from .pipeline import bubble_fraction

    right = bubble_fraction(4, 8)
    ok = isinstance(answer, (int, float)) and not isinstance(answer, bool) and abs(answer - right) < 0.01
    return _verdict(answer, ok, f"{right:.3f} = (S - 1) / (M + S - 1).",
                    "Give a fraction between 0 and 1: (stages - 1) / (micro-batches + stages - 1).")


# --- notebook 04 -------------------------------------------------------------------------------

def nb04_what_to_save(answer: Any) -> Verdict:
    """Trained through a parallel wrapper: save the 'wrapper' or the 'template'?"""
    ok = isinstance(answer, str) and answer.strip().lower() == "template"
    return _verdict(answer, ok, "The template owns the weights; its file loads into the model you deploy.",
                    "Answer 'wrapper' or 'template'. Which file loaded into a fresh template in section 1?")


def nb04_reshuffle(answer: Any) -> Verdict:
    """reshuffle_each_iteration needed for a bit-identical resume (True/False)."""
    ok = answer is False
    return _verdict(answer, ok, "With one fixed order, the resumed epochs see exactly the same batches.",
                    "Answer True or False. What happens to a per-epoch shuffle when the process restarts?")


# --- notebook 05 -------------------------------------------------------------------------------

def _empty_replicas(n: int, batch: int, replicas: int) -> list[int]:
    from .batching import plan_batches

    return [i for i, size in enumerate(plan_batches(n, batch, replicas)[-1]) if size == 0]


def nb05_empty_replicas_a(answer: Any) -> Verdict:
    """1030 samples, global batch 64, 8 replicas: which replicas get nothing in the last step? (a list)"""
    right = _empty_replicas(1030, 64, 8)
    ok = isinstance(answer, (list, tuple)) and sorted(answer) == right
    return _verdict(answer, ok, f"{right}: the last 6 samples go 1 per replica to replicas 0-5.",
                    "Give a list of replica numbers (0-based). How many samples does the last step hold?")


def nb05_empty_replicas_b(answer: Any) -> Verdict:
    """1000 samples, global batch 96, 8 replicas: which replicas get nothing in the last step? (a list)"""
    right = _empty_replicas(1000, 96, 8)
    ok = isinstance(answer, (list, tuple)) and sorted(answer) == right
    return _verdict(answer, ok, f"{right or 'none'}: the last 40 samples split 5 per replica, so every replica "
                    "gets data.", "Give a list (possibly empty). 1000 - 10 x 96 samples, ceil(n / 8) each, in order.")


def nb05_identical_copies(answer: Any) -> Verdict:
    """Which fix keeps every replica's moving statistics identical: 'drop_remainder', 'repeat', 'pad' or
    'synchronized'?"""
    ok = isinstance(answer, str) and answer.strip().lower() == "synchronized"
    return _verdict(answer, ok, "Synchronized BatchNormalization computes the statistics over the global batch, "
                    "so every replica writes the same values.",
                    "Look at the 'spread' column of the fixes table.")


# --- notebook 06 -------------------------------------------------------------------------------

def nb06_scaled_lr(answer: Any) -> Verdict:
    """Learning rate 0.05 works at batch 32; by the linear scaling rule, what is it at batch 512?"""
    from .lrscaling import linear_scaled_lr

    right = linear_scaled_lr(0.05, 32, 512)
    ok = isinstance(answer, (int, float)) and not isinstance(answer, bool) and abs(answer - right) < 1e-9
    return _verdict(answer, ok, f"{right:g}: the batch grew 16x, so the learning rate grows 16x (with a warm-up).",
                    "Give a number: base learning rate x (new batch / base batch).")


def nb06_efficiency(answer: Any) -> Verdict:
    """Predicted efficiency of VGG-16 on 8 GPUs over PCIe 3.0, per-GPU batch 64, overlap 0.1 (a fraction)."""
    from .scaling import predict_curve

    right = predict_curve("VGG-16", "PCIe 3.0 x16 (one server)", 64, 8, 0.1)[-1].efficiency
    ok = isinstance(answer, (int, float)) and not isinstance(answer, bool) and abs(answer - right) < 0.01
    return _verdict(answer, ok, f"{right:.2f}: read it from kit.scaling.predict_curve(...)[-1].efficiency.",
                    "Give a fraction between 0 and 1 (e.g. 0.85). Use the explorer or kit.scaling.predict_curve.")


# --- notebook 07 -------------------------------------------------------------------------------

NB07_HOSTS = ["gpu-a:12345", "gpu-b:12345", "gpu-c:12345"]


def nb07_tf_config(answer: Any) -> Verdict:
    """TF_CONFIG (a JSON string or a dict) for the host gpu-c in the cluster gpu-a, gpu-b, gpu-c (port 12345)."""
    import json

    config = answer
    if isinstance(answer, str):
        try:
            config = json.loads(answer)
        except ValueError:
            config = None
    try:
        ok = (config["cluster"] == {"worker": NB07_HOSTS} and config["task"]["type"] == "worker"
              and config["task"]["index"] == 2)
    except (TypeError, KeyError):
        ok = False
    return _verdict(answer, ok, "Every host gets the same cluster list and its own index; gpu-c is index 2.",
                    "Give a JSON string or dict like {'cluster': {'worker': [...]}, 'task': {'type': 'worker', "
                    "'index': i}}, with the three hosts in order; kit.multiworker.tf_config(hosts, i) writes it.")


def nb07_global_batch(answer: Any) -> Verdict:
    """Three workers, one replica each: the smallest global batch of at least 64 the custom loop accepts."""
    right = next(b for b in range(64, 200) if b % 3 == 0)
    ok = _is_int(answer) and answer == right
    return _verdict(answer, ok, f"{right} = 3 x {right // 3}: get_per_replica_batch_size needs a global batch divisible "
                    "by the number of replicas in the whole cluster.",
                    "Give a number: the global batch must split evenly over all replicas of all workers.")


def nb07_resume_step(answer: Any) -> Verdict:
    """Checkpoint after every 50th step; a worker dies during step 437 (from 0): where does the relaunch start?"""
    right = (437 // 50) * 50
    ok = _is_int(answer) and answer == right
    return _verdict(answer, ok, f"{right}: the last checkpoint was written after step {right - 1}; steps "
                    f"{right} to 436 are done again. Checkpoint more often when preemptions are frequent.",
                    "Give a step number: the relaunch starts right after the last checkpoint, not at the crash.")
