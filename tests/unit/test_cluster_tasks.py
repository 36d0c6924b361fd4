"""kit.cluster.worker_task / chief_or_scratch_dir follow TensorFlow's chief rule for every TF_CONFIG layout
(multi_worker_util.is_chief): the "chief" task where the cluster has one, else worker 0; an evaluator is its own."""
from __future__ import annotations

import json
import os

import pytest

from gputrain_kit import cluster

WORKERS_ONLY = {"worker": ["a:1", "b:2", "c:3"]}
WITH_CHIEF = {"chief": ["a:1"], "worker": ["b:2", "c:3"]}
WITH_EVALUATOR = {"chief": ["a:1"], "worker": ["b:2"], "evaluator": ["e:9"]}

LAYOUTS = [
    (WORKERS_ONLY, "worker", 0, True),
    (WORKERS_ONLY, "worker", 2, False),
    (WITH_CHIEF, "chief", 0, True),
    (WITH_CHIEF, "worker", 0, False),       # worker 0 is not the chief where a chief task exists
    (WITH_CHIEF, "worker", 1, False),
    (WITH_EVALUATOR, "evaluator", 0, True),
    ({"worker": ["b:2"]}, "evaluator", 0, True),    # TensorFlow lets the evaluator be missing from the cluster
    ({"chief": ["a:1"], "worker": ["b:2"], "ps": ["p:3"]}, "ps", 0, False),
]


def _set(monkeypatch, cluster_spec, kind, index):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster_spec, "task": {"type": kind, "index": index}}))


@pytest.mark.parametrize("cluster_spec, kind, index, chief", LAYOUTS)
def test_is_chief_is_tensorflows_rule(monkeypatch, cluster_spec, kind, index, chief):
    from tensorflow.python.distribute import multi_worker_util

    _set(monkeypatch, cluster_spec, kind, index)
    task = cluster.worker_task()
    assert (task.type, task.index, task.is_chief) == (kind, index, chief)
    assert multi_worker_util.is_chief(cluster_spec, kind, index) == chief


@pytest.mark.parametrize("cluster_spec, kind, index, chief", LAYOUTS)
def test_only_the_training_chief_writes_the_shared_folder(monkeypatch, cluster_spec, kind, index, chief):
    _set(monkeypatch, cluster_spec, kind, index)
    path = cluster.chief_or_scratch_dir("/shared/ckpt")
    if chief and kind != "evaluator":
        assert path == "/shared/ckpt"
    else:
        assert path != "/shared/ckpt" and os.path.isdir(path)
        os.rmdir(path)


def test_one_writer_per_layout(monkeypatch):
    for cluster_spec in (WORKERS_ONLY, WITH_CHIEF, WITH_EVALUATOR):
        writers = []
        for kind, addresses in cluster_spec.items():
            for index in range(len(addresses)):
                _set(monkeypatch, cluster_spec, kind, index)
                path = cluster.chief_or_scratch_dir("/shared/ckpt")
                if path == "/shared/ckpt":
                    writers.append((kind, index))
                else:
                    os.rmdir(path)
        assert len(writers) == 1, (cluster_spec, writers)


def test_worker_task_refuses_what_tensorflow_refuses(monkeypatch):
    _set(monkeypatch, WORKERS_ONLY, "chief", 0)
    with pytest.raises(ValueError, match="not a job of its cluster"):
        cluster.worker_task()
    _set(monkeypatch, WORKERS_ONLY, "master", 0)
    with pytest.raises(ValueError, match="TensorFlow allows"):
        cluster.worker_task()
    _set(monkeypatch, WORKERS_ONLY, "worker", 3)
    with pytest.raises(ValueError, match="index 3 is outside"):
        cluster.worker_task()
    monkeypatch.setenv("TF_CONFIG", '{"cluster": ["a:1"], "task": {"type": "worker", "index": 0}}')
    with pytest.raises(ValueError, match="TF_CONFIG is not valid"):
        cluster.worker_task()
    monkeypatch.delenv("TF_CONFIG")
    assert cluster.worker_task() == cluster.WorkerTask(0, 1) and cluster.worker_task().is_chief
