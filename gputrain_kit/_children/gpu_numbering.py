"""GPU machines only: each TensorFlow GPU's PCI bus ID next to nvidia-smi's index, bus and name
(``visibility.measured_numbering`` runs this in a process with the ``CUDA_DEVICE_ORDER`` it measures)."""
from __future__ import annotations

import re
import subprocess
from typing import Any


def run() -> dict[str, Any]:
    from tensorflow.python.client import device_lib

    gpus = [d for d in device_lib.list_local_devices() if d.device_type == "GPU"]
    smi = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id,name", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout
    found = [re.search(r"pci bus id: ([^,]+)", d.physical_device_desc) for d in gpus]
    return {"tf": [m.group(1).strip() for m in found if m],
            "smi": [[field.strip() for field in line.split(",", 2)] for line in smi.strip().splitlines()]}
