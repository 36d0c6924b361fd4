"""Exercise checks of notebook 07."""
from __future__ import annotations

from typing import Any

from ._common import Verdict, _short, _unquote, as_int, read, verdict

NB07_HOSTS = ["gpu-a:12345", "gpu-b:12345", "gpu-c:12345"]
_BATCH = ("global", "batch", "of", "a", "sample", "example")      # 'a global batch of 66', '66 samples'


def _is_json(text: str) -> bool:
    """Whether ``text`` (as the checks read it: outer quotes dropped) is JSON, as TensorFlow reads TF_CONFIG
    (``json.loads`` in tfconfig_cluster_resolver.py); a dict as Python prints it is not."""
    import json

    try:
        json.loads(text.strip() if text.strip().startswith("{") else _unquote(text))
    except ValueError:
        return False
    return True


def nb07_tf_config(answer: Any) -> Verdict:
    """TF_CONFIG (a JSON string, as TensorFlow reads it, or a dict) for the host gpu-c in the cluster gpu-a, gpu-b, gpu-c (port 12345)."""
    got = read(answer, "mapping", form="Give a JSON string or a dict like {'cluster': {'worker': [...]}, "
               "'task': {'type': 'worker', 'index': i}}.")
    if got.refusal is not None:
        return got.refusal
    if isinstance(answer, str) and not _is_json(answer):
        return Verdict(False, f"Not yet: TensorFlow cannot read this text, {_short(answer)}. It reads TF_CONFIG with "
                              "json.loads, which refuses Python's way of writing a dict (single quotes, True, None), "
                              "as str(config) writes it: write json.dumps(config), or give the dict itself.")
    config = got.value
    try:
        ok = (set(config["cluster"]) == {"worker"} and not isinstance(config["cluster"]["worker"], str)
              and list(config["cluster"]["worker"]) == NB07_HOSTS and config["task"]["type"] == "worker"
              and as_int(config["task"]["index"]) == 2)
    except (TypeError, KeyError):
        ok = False
    hint = ("The three hosts in order, the same list on every host, and this host's own index; "
            "kit.multiworker.tf_config(hosts, i) writes it.")
    try:                             # the likeliest slips, named
        if "chief" in config["cluster"] or config["task"]["type"] != "worker":
            hint = ("This course's clusters have workers only (worker 0 is the chief): the cluster's one job is "
                    "'worker', and so is the task's type.")
        elif as_int(config["task"]["index"]) == 3:
            hint = "Indices count from 0: gpu-a is 0."
        elif any(":" not in str(host) for host in config["cluster"]["worker"]):
            hint = "Each host needs its port: 'gpu-a:12345'."
    except (TypeError, KeyError, AttributeError):
        pass
    return verdict(answer, ok, "Every host gets the same cluster list and its own index; gpu-c is index 2.", hint)


def nb07_global_batch(answer: Any) -> Verdict:
    """Three workers, one replica each: the smallest global batch of at least 64 the custom loop accepts."""
    got = read(answer, "int", words=_BATCH, form="Give a whole number, e.g. 64.")
    if got.refusal is not None:
        return got.refusal
    value = got.value
    right = next(b for b in range(64, 200) if b % 3 == 0)
    hint = "The global batch must split evenly over all replicas of all workers."
    if value % 3 == 0 and value > right:
        hint = f"{value} splits evenly over the 3 replicas, but a smaller batch of at least 64 does too."
    elif value < 64:
        hint = "The question asks for a global batch of at least 64."
    return verdict(answer, value == right, f"{right} = 3 x {right // 3}: get_per_replica_batch_size needs a global "
                   "batch divisible by the number of replicas in the whole cluster.", hint)


def nb07_resume_step(answer: Any) -> Verdict:
    """Checkpoint after every 50th step; a worker dies during step 437 (from 0): where does the relaunch start?"""
    got = read(answer, "int", words=("step", "at"), form="Give a step number, e.g. 100.")
    if got.refusal is not None:
        return got.refusal
    value = got.value
    right = (437 // 50) * 50
    hint = "The relaunch starts right after the last checkpoint, not at the crash."
    if value == right - 1:
        hint = f"Step {value} is the last one the checkpoint holds: where does the relaunch start?"
    return verdict(answer, value == right, f"{right}: the last checkpoint was written after step {right - 1}; steps "
                   f"{right} to 436 are done again. Checkpoint more often when preemptions are frequent.", hint)


# Exercises 4 and 5 read this TF_CONFIG, set on the host gpu-a, whose worker sees 4 GPUs (as every host's does).
NB07_GIVEN_TF_CONFIG = ('{"cluster": {"worker": ["gpu-b:12345", "gpu-a:12345", "gpu-c:12345"]}, '
                        '"task": {"type": "worker", "index": 1}}')


def nb07_per_replica_batch(answer: Any) -> Verdict:
    """NB07_GIVEN_TF_CONFIG, 4 GPUs per worker, train_worker with global_batch=96: examples per replica per step."""
    got = read(answer, "int", words=("example", "sample", "per", "replica", "each"),
               form="Give a whole number of examples, e.g. 32.")
    if got.refusal is not None:
        return got.refusal
    workers, gpus, global_batch = 3, 4, 96
    right = global_batch // (workers * gpus)
    return verdict(answer, got.value == right, f"{right} = {global_batch} / ({workers} workers x {gpus} replicas): "
                   "get_per_replica_batch_size divides the global batch by every replica of the whole cluster.",
                   "Count the replicas of the whole cluster, not of one worker: the global batch is shared by "
                   "all of them.")


def nb07_is_chief(answer: Any) -> Verdict:
    """NB07_GIVEN_TF_CONFIG on gpu-a: are gpu-a's checkpoints the ones kept (is it the chief)? True or False."""
    got = read(answer, "bool", form="Give True or False.")
    if got.refusal is not None:
        return got.refusal
    return verdict(answer, got.value is False, "No: the chief is worker 0, the first host of the list (gpu-b); gpu-a "
                   "is worker 1 and writes to a scratch folder.",
                   "The chief is chosen by its index in the cluster list, not by the host's name or the order "
                   "you started them in.")
