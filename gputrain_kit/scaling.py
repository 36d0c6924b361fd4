"""What speed-up to expect from N GPUs: a small, explicit performance model (no GPU needed).

step time   = compute + exposed communication
compute     = per-GPU batch x compute time per sample
all-reduce  = ring: each GPU sends and receives 2(N-1)/N of the gradient bytes over the link,
              in 2(N-1) messages that each pay the link latency
exposed     = max(0, all-reduce - overlap x compute)   (overlap: share of compute that can hide it)
throughput  = min(N x per-GPU batch / step time, input-pipeline ceiling)
efficiency  = throughput / (N x one GPU's throughput)

What it leaves out: a hierarchy of links (GPUs inside a server reducing over NVLink or PCIe before
the servers talk; callers model one level at a time), how a library packs gradients into messages
(Horovod's Tensor Fusion, NCCL's protocols), congestion, stragglers, mixed precision, and where
the single-GPU speed comes from (an input to the model, never measured by it).

Overlap: gradients can only be sent once they exist, so communication can hide only behind the
rest of the backward pass: ``overlap`` is at most the backward pass's share of the compute, and 0
when the all-reduce starts after the whole backward pass. Notebook 06 uses 0.1, a cautious value,
and shows how much the predictions depend on it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ._args import require_int, require_number, short

__all__ = ["Link", "LINKS", "NETWORKS", "ScalingPrediction", "scaling_model", "predict_curve", "ASSUMPTIONS"]

ASSUMPTIONS = (
    "synchronous data parallelism, one all-reduce of all gradients per step (ring algorithm)",
    "every GPU computes equally fast; no stragglers; the per-GPU batch is fixed (weak scaling)",
    "the link is the only shared resource; its bandwidth is per direction, per GPU",
    "overlap: the fraction of compute time during which communication can proceed in the background "
    "(at most the backward pass's share: gradients must exist before they are sent)",
    "the input pipeline delivers at most `input_ceiling` samples/s for the whole machine",
)


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth: float   # bytes/s per direction
    latency: float     # seconds per message


LINKS = {
    "PCIe 3.0 x16 (one server)": Link("PCIe 3.0 x16", 12e9, 10e-6),
    "NVLink 2 (V100 SXM2)": Link("NVLink 2", 150e9, 5e-6),
    "25 Gbit/s Ethernet (servers)": Link("25 Gbit/s Ethernet", 3.125e9, 30e-6),
    "InfiniBand EDR 100 Gbit/s (servers)": Link("InfiniBand EDR", 12.5e9, 5e-6),
}


@dataclass(frozen=True)
class ScalingPrediction:
    gpus: int
    compute_s: float
    allreduce_s: float
    exposed_s: float
    step_s: float
    samples_per_s: float
    ideal_samples_per_s: float
    efficiency: float
    bottleneck: str     # "the input pipeline" when it caps throughput, else the larger part of a step:
                        # "compute" or "communication"

    @property
    def communication_share(self) -> float:
        """Share of each step spent waiting for communication that compute did not hide."""
        return self.exposed_s / self.step_s

    def __repr__(self) -> str:
        capped = "; capped by the input pipeline" if self.bottleneck == "the input pipeline" else ""
        return (f"{self.gpus} GPU(s): {self.samples_per_s:,.0f} samples/s of an ideal {self.ideal_samples_per_s:,.0f} "
                f"-> efficiency {self.efficiency:.0%} (step {self.step_s * 1e3:.1f} ms = compute "
                f"{self.compute_s * 1e3:.1f} ms + exposed communication {self.exposed_s * 1e3:.1f} ms, "
                f"{self.communication_share:.0%} of the step{capped})")


def scaling_model(gpus: int, *, compute_time_per_sample: float, gradient_bytes: float, per_gpu_batch: int,
                  bandwidth: float, latency: float = 10e-6, overlap: float = 0.0,
                  input_ceiling: float | None = None) -> ScalingPrediction:
    """Predict samples/s and scaling efficiency of synchronous data-parallel training on ``gpus`` GPUs.

    Units: seconds, bytes, bytes/s, samples/s. See ASSUMPTIONS (printed by the notebook).
    """
    gpus = require_int("scaling_model", "gpus", gpus, minimum=1)
    per_gpu_batch = require_int("scaling_model", "per_gpu_batch", per_gpu_batch, minimum=1)
    t_sample = require_number("scaling_model", "compute_time_per_sample", compute_time_per_sample)
    grad = require_number("scaling_model", "gradient_bytes", gradient_bytes, allow_zero=True)
    bw = require_number("scaling_model", "bandwidth", bandwidth)
    lat = require_number("scaling_model", "latency", latency, allow_zero=True)
    if isinstance(overlap, bool) or not isinstance(overlap, (int, float)) or not 0 <= overlap <= 1:
        raise ValueError(f"scaling_model: overlap must be between 0 and 1, got {short(overlap)}.")
    ceiling = float("inf") if input_ceiling is None else require_number("scaling_model", "input_ceiling", input_ceiling)

    compute = per_gpu_batch * t_sample
    allreduce = 0.0 if gpus == 1 else 2 * (gpus - 1) / gpus * grad / bw + 2 * (gpus - 1) * lat
    exposed = max(0.0, allreduce - overlap * compute)
    step = compute + exposed
    raw = gpus * per_gpu_batch / step
    throughput = min(raw, ceiling)
    one_gpu = min(per_gpu_batch / compute, ceiling)
    ideal = gpus * one_gpu
    bottleneck = ("the input pipeline" if raw > ceiling else
                  "communication" if exposed > compute else "compute")
    return ScalingPrediction(gpus, compute, allreduce, exposed, step, throughput, ideal, throughput / ideal, bottleneck)


#: Networks for the explorer and the comparison with Horovod's published benchmark: parameters
#: (gradient bytes = 4 x params, fp32) and a single-GPU throughput in images/s that is this course's
#: assumption for a Pascal (P100-class) GPU, not a measurement.
NETWORKS = {
    "Inception V3": (23.85e6, 140.0),
    "ResNet-101": (44.55e6, 120.0),
    "VGG-16": (138.36e6, 130.0),
}


def predict_curve(network: str, link: str, per_gpu_batch: int, max_gpus: int, overlap: float = 0.1):
    """Predictions for 1..max_gpus GPUs of a NETWORKS entry over a LINKS entry."""
    if network not in NETWORKS:
        raise ValueError(f"predict_curve: unknown network {short(network)}; choose from {list(NETWORKS)}.")
    if link not in LINKS:
        raise ValueError(f"predict_curve: unknown link {short(link)}; choose from {list(LINKS)}.")
    params, rate = NETWORKS[network]
    chosen = LINKS[link]
    return [scaling_model(n, compute_time_per_sample=1 / rate, gradient_bytes=4 * params,
                          per_gpu_batch=per_gpu_batch, bandwidth=chosen.bandwidth, latency=chosen.latency,
                          overlap=overlap) for n in range(1, max_gpus + 1)]
