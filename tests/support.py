"""Helpers only the tests use (they measure or inspect what the kit and the notebooks claim)."""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, Sequence

from gputrain_kit.feeding import standardize_python


def slow_python_pipeline(x: Any, y: Any, batch_size: int = 64):
    """``standardize_python`` on one sample at a time (tf.py_function, which holds the GIL), no overlap."""
    import tensorflow as tf

    def preprocess(image, label):
        image = tf.py_function(standardize_python, [image], tf.float32)
        image.set_shape(x.shape[1:])
        return image, label

    return tf.data.Dataset.from_tensor_slices((x, y)).map(preprocess).batch(batch_size)


def listening_sockets() -> list[tuple[str, int]]:
    """(address, port) of every TCP socket listening in this process's network namespace, from
    /proc/net/tcp and /proc/net/tcp6 (read, never by connecting)."""
    import ipaddress

    found = []
    for name, width in (("tcp", 4), ("tcp6", 16)):
        try:
            with open(f"/proc/net/{name}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != "0A":   # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)
            # /proc writes each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)) if sys.byteorder == "little" else raw
            ip = ipaddress.ip_address(raw[:width])
            found.append((str(ip), int(port, 16)))
    return found


def time_stages(stages: Sequence[Callable[[Any], Any]], devices: Sequence[str], x: Any,
                repeats: int = 3) -> list[tuple[str, float, float]]:
    """Run stage i on devices[i], one after the other, as a naive split does; (device, start, end) seconds.

    Each stage's output is waited for (``.numpy()``) before the next starts. The best of ``repeats``
    runs is kept, after one warm-up.
    """
    import tensorflow as tf

    if len(stages) != len(devices):
        raise ValueError(f"time_stages: {len(stages)} stage(s) but {len(devices)} device(s).")
    best: list[tuple[str, float, float]] | None = None
    for attempt in range(repeats + 1):
        t0, h, rows = time.perf_counter(), x, []
        for stage, device in zip(stages, devices):
            start = time.perf_counter() - t0
            with tf.device(device):
                h = stage(h)
            _ = h.numpy()  # wait for the stage to finish
            rows.append((device, start, time.perf_counter() - t0))
        if attempt and (best is None or rows[-1][2] < best[-1][2]):
            best = rows
    return best
