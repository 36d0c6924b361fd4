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

Bandwidth: the all-reduce's achievable *bus bandwidth* per GPU, what NCCL's tests call busbw
(NVIDIA/nccl-tests, doc/PERFORMANCE.md): for an all-reduce, busbw = algbw x 2(N-1)/N, so a ring over
N GPUs takes 2(N-1)/N x bytes / busbw, this model's formula. Run ``all_reduce_perf`` on your machine and
pass the busbw it prints for large messages. A line rate in its place (most of ``LINKS``: see each
link's ``basis``) makes every prediction an upper bound, and so do GPUs that share a link: the 8 GPUs of
one PCIe server sit behind shared PCIe switches and CPU uplinks, so each gets less than its own slot's rate.

Overlap: gradients can only be sent once they exist, so communication can hide only behind the
rest of the backward pass: ``overlap`` is at most the backward pass's share of the compute, and 0
when the all-reduce starts after the whole backward pass. Notebook 06 uses 0.1, a cautious value,
and shows how much the predictions depend on it. Even full overlap leaves the last gradient bucket
(the first layers' gradients, computed last) to be sent after the backward pass, with nothing left to
hide behind; the model ignores it, so its 100% is never reached.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ._args import require_int, require_number, short

__all__ = ["Link", "LINKS", "NETWORKS", "ScalingPrediction", "scaling_model", "predict_curve", "ASSUMPTIONS"]

ASSUMPTIONS = (
    "synchronous data parallelism, one all-reduce of all gradients per step (ring algorithm)",
    "every GPU computes equally fast; no stragglers; the per-GPU batch is fixed (weak scaling)",
    "bandwidth: the all-reduce's achievable bus bandwidth per GPU (NCCL's busbw, as nccl-tests reports it); "
    "a link's line rate in its place, or GPUs that share a link (one server's PCIe switches and uplinks), "
    "make every prediction an upper bound",
    "overlap: the fraction of compute time during which communication can proceed in the background "
    "(at most the backward pass's share: gradients must exist before they are sent); the last gradient "
    "bucket (gradients are sent in groups, buckets, each once the backward pass has produced it), sent after "
    "the backward pass, is ignored, so 100% is never reached in practice",
    "the input pipeline delivers at most `input_ceiling` samples/s for the whole machine",
)


@dataclass(frozen=True)
class Link:
    """A link of the model: ``bandwidth`` stands for the all-reduce's bus bandwidth per GPU (bytes/s per
    direction), ``latency`` is seconds per message, ``basis`` says what kind of number the bandwidth is."""
    name: str
    bandwidth: float   # bytes/s per direction, used as the all-reduce's bus bandwidth (NCCL's busbw)
    latency: float     # seconds per message
    basis: str = ""
    max_gpus: int | None = None   # a link inside one server joins at most that server's GPUs; None: between servers


#: The explorer's links. Only the PCIe entry is an effective rate; the others are line rates or, for NVLink,
#: the sum of a GPU's links: what an all-reduce achieves over them is lower (see ``basis``).
LINKS = {
    "PCIe 3.0 x16 (one server)": Link(
        "PCIe 3.0 x16, effective rate", 12e9, 10e-6,
        "effective rate of one x16 slot (about 12 of its 15.75 GB/s line rate per direction); a server's 8 GPUs "
        "share PCIe switches and CPU uplinks, so each gets less: an upper bound at 8 GPUs", max_gpus=8),
    "NVLink 2 (V100 SXM2)": Link(
        "NVLink 2, 6 links summed", 150e9, 5e-6,
        "sum of a V100 SXM2's 6 NVLink 2 links (25 GB/s each per direction); an all-reduce reaches less, "
        "depending on how the links connect the GPUs: an upper bound", max_gpus=8),
    "25 Gbit/s Ethernet (servers)": Link(
        "25 Gbit/s Ethernet, line rate", 3.125e9, 30e-6,
        "line rate (25 Gbit/s = 3.125 GB/s per direction); protocol overhead leaves less: an upper bound"),
    "InfiniBand EDR 100 Gbit/s (servers)": Link(
        "InfiniBand EDR, line rate", 12.5e9, 5e-6,
        "line rate (100 Gbit/s = 12.5 GB/s per direction); protocol overhead leaves less: an upper bound"),
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
    note: str = ""      # a warning about the setup (e.g. more GPUs than the link can join), shown by repr

    @property
    def communication_share(self) -> float:
        """Share of each step spent waiting for communication that compute did not hide."""
        return self.exposed_s / self.step_s

    def __repr__(self) -> str:
        capped = "; capped by the input pipeline" if self.bottleneck == "the input pipeline" else ""
        return (f"{self.gpus} GPU(s): {self.samples_per_s:,.0f} samples/s of an ideal {self.ideal_samples_per_s:,.0f} "
                f"-> efficiency {self.efficiency:.0%} (step {self.step_s * 1e3:.1f} ms = compute "
                f"{self.compute_s * 1e3:.1f} ms + exposed communication {self.exposed_s * 1e3:.1f} ms, "
                f"{self.communication_share:.0%} of the step{capped})" + (f". {self.note}" if self.note else ""))


def scaling_model(gpus: int, *, compute_time_per_sample: float, gradient_bytes: float, per_gpu_batch: int,
                  bandwidth: float, latency: float = 10e-6, overlap: float = 0.0,
                  input_ceiling: float | None = None) -> ScalingPrediction:
    """Predict samples/s and scaling efficiency of synchronous data-parallel training on ``gpus`` GPUs.

    Units: seconds, bytes, bytes/s, samples/s. ``bandwidth``: the all-reduce's achievable bus bandwidth per GPU
    (NCCL's busbw); a line rate gives an upper bound. See ASSUMPTIONS (printed by the notebook).
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
    """Predictions for 1..max_gpus GPUs of a NETWORKS entry over a LINKS entry (upper bounds where the link's
    ``basis`` is a line rate or a shared link). A link inside one server (``Link.max_gpus``) joins at most that
    server's GPUs: the predictions beyond it carry a ``note`` saying so (the explorer shows it)."""
    if network not in NETWORKS:
        raise ValueError(f"predict_curve: unknown network {short(network)}; choose from {list(NETWORKS)}.")
    if link not in LINKS:
        raise ValueError(f"predict_curve: unknown link {short(link)}; choose from {list(LINKS)}.")
    max_gpus = require_int("predict_curve", "max_gpus", max_gpus, minimum=1)
    params, rate = NETWORKS[network]
    chosen = LINKS[link]
    curve = []
    for n in range(1, max_gpus + 1):
        p = scaling_model(n, compute_time_per_sample=1 / rate, gradient_bytes=4 * params,
                          per_gpu_batch=per_gpu_batch, bandwidth=chosen.bandwidth, latency=chosen.latency,
                          overlap=overlap)
        if chosen.max_gpus is not None and n > chosen.max_gpus:
            p = replace(p, note=f"Not a real setup: {link} joins the GPUs of one server, at most "
                                f"{chosen.max_gpus}; {n} GPUs span several servers, linked by a network (choose "
                                "an Ethernet or InfiniBand link)")
        curve.append(p)
    return curve
