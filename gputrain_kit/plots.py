"""Matplotlib figures for the notebooks (pure functions of data: testable headless)."""
from __future__ import annotations

from typing import Any, Sequence

from .memory import TIGHT_SHARE, human_bytes  # noqa: F401  (human_bytes: also plots'; memory never imports plots)

__all__ = ["scaling_figure", "memory_figure", "scaling_curve_figure", "sweep_figure", "replica_heatmap",
           "activity_figure", "activity_comparison", "KINDS"]

#: The card's line in the memory figure, and the accumulators' bars (cyan: far from the line's red in any eye).
CARD_COLOUR = "red"
ACCUMULATOR_COLOUR = "tab:cyan"

#: What a bar of a device-activity timeline shows (``DeviceActivity.bars``), in the legend's order.
KINDS = ("forward", "backward", "gradient reduction", "update", "input pipeline")


def scaling_figure(rows: Sequence[dict[str, Any]]):
    """Two panels from explorer rows: samples/s by replica count, validation accuracy by global batch."""
    import matplotlib.pyplot as plt

    fig, (speed, acc) = plt.subplots(1, 2, figsize=(9, 3.2))
    done = [r for r in rows if r.get("val accuracy") is not None]
    kinds = sorted({r["devices"] for r in done}) or ["simulated"]
    for kind in kinds:
        mine = [r for r in done if r["devices"] == kind]
        speed.scatter([r["replicas"] for r in mine], [r["samples/s"] for r in mine], label=kind)
        acc.scatter([r["global batch"] for r in mine], [r["val accuracy"] for r in mine], label=kind)
    from matplotlib.ticker import MaxNLocator, NullFormatter, ScalarFormatter

    speed.set(xlabel="replicas", ylabel="samples/s", title="throughput" + (
        " (simulated: shared CPU cores)" if "simulated" in kinds else ""))
    speed.xaxis.set_major_locator(MaxNLocator(integer=True))          # replica counts are whole numbers
    speed.set_xlim(0.5, max([4] + [r["replicas"] for r in done]) + 0.5)   # 1 to 4 replicas, even for one point
    acc.set(xlabel="global batch", ylabel="validation accuracy", xscale="log", title="accuracy at fixed epochs")
    batches = sorted({r["global batch"] for r in done})
    if batches:
        acc.set_xticks(batches)                                      # the batches run, as plain numbers
    acc.xaxis.set_major_formatter(ScalarFormatter())
    acc.xaxis.set_minor_formatter(NullFormatter())
    for ax in (speed, acc):
        ax.grid(alpha=0.3)
    if done:
        for ax in (speed, acc):                                      # each point labelled with its run
            xkey = "replicas" if ax is speed else "global batch"
            ykey = "samples/s" if ax is speed else "val accuracy"
            seen: dict[tuple[Any, Any], int] = {}
            for r in done:                                           # throughput: the global batch it ran
                label = f"global {r['global batch']}" if ax is speed else f"{r['replicas']}x{r['per replica']}"
                point = (r[xkey], round(r[ykey], 3 if ax is acc else -1))
                nth = seen[point] = seen.get(point, -1) + 1          # a repeated setting: labels stacked, not on top
                ax.annotate(label, (r[xkey], r[ykey]), fontsize=7, textcoords="offset points", xytext=(4, 3 + 8 * nth))
        acc.legend(title="devices", loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)  # outside the data
        accuracies = [r["val accuracy"] for r in done]          # at least 10 points tall: a 0.003 gap looks small
        middle, half = (max(accuracies) + min(accuracies)) / 2, max(0.05, (max(accuracies) - min(accuracies)) * 0.6)
        acc.set_ylim(max(0.0, middle - half), min(1.0, middle + half) + 0.01)
    fig.tight_layout()
    plt.close(fig)
    return fig


def memory_figure(estimate: Any, capacity_gb: float):
    """Per-device totals against a card's memory (left), and the fullest device's parts (right), on a linear
    scale, so that the largest part looks largest; each bar is labelled with its size, a sliver included."""
    import matplotlib.pyplot as plt

    every: tuple[str, ...] = ("parameters", "gradients", "optimizer", "accumulators", "activations", "temporaries")
    colour_of = dict(zip(every, plt.rcParams["axes.prop_cycle"].by_key()["color"]))   # one colour per part, always
    colour_of["temporaries"] = "tab:olive"          # the cycle's sixth (brown) beside activations' purple: apart
    # accumulators: not the cycle's fourth colour (red), which read as the card's red line; the other parts keep theirs
    colour_of["accumulators"] = ACCUMULATOR_COLOUR
    parts = tuple(p for p in every if p not in ("accumulators", "temporaries")
                  or any(d.get(p) for d in estimate.per_device))       # a stored profile may have no temporaries
    # Fixed margins, not a layout engine: MemoryExplorer redraws this on every change, and constrained layout
    # costs an extra pass over every artist per draw (the widget's update took 0.6-0.7 s on a Zen 3).
    fig, (ax, parts_ax) = plt.subplots(1, 2, figsize=(9, 3.4), gridspec_kw={
        "width_ratios": [3, 2], "left": 0.065, "right": 0.975, "bottom": 0.25, "top": 0.86, "wspace": 0.32})
    xs = list(range(len(estimate.per_device)))
    bottom = [0.0] * len(xs)
    for part in parts:
        values = [d[part] / 1e9 for d in estimate.per_device]
        ax.bar(xs, values, bottom=bottom, label=part, color=colour_of[part])
        bottom = [b + v for b, v in zip(bottom, values)]
    top = max(max(bottom), capacity_gb) * 1.15
    for x, total in zip(xs, bottom):
        # a total just under or over the card's line is written above the line, not through it
        y = max(total, capacity_gb) + 0.01 * top if abs(total - capacity_gb) < 0.06 * top else total
        ax.annotate(f"{total:.2f}" if total >= 0.01 else human_bytes(total * 1e9), (x, y), ha="center",
                    va="bottom", fontsize=8)            # a small model's total in the unit that reads, not "0.00"
    ax.axhline(capacity_gb, color=CARD_COLOUR, linestyle="--", label=f"{capacity_gb:g} GB card")
    ax.axhline(TIGHT_SHARE * capacity_gb, color=CARD_COLOUR, linestyle=":", alpha=0.5,
               label=f"{TIGHT_SHARE:.0%} of it: tight above")
    ax.set(xticks=xs, xticklabels=[str(i) for i in xs], xlabel="device", ylabel="GB",   # 8 labels fit
           ylim=(0, top),
           title=f"{estimate.strategy}: {len(xs)} device(s), global batch {estimate.batch_size}")
    fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=7, fontsize=8, frameon=False)
    fullest = max(estimate.per_device, key=lambda d: d["total"])
    shown = [part for part in parts if fullest[part] > 0]       # no bar of 0 bytes: said in words
    largest = max((fullest[part] for part in shown), default=1e9)
    unit, scale = next(((u, f) for u, f in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)) if largest >= f), ("bytes", 1.0))
    values = [fullest[part] / scale for part in shown]        # the axis in the unit of the largest part
    parts_ax.barh(range(len(shown)), values, color=[colour_of[p] for p in shown])
    for row, (part, value) in enumerate(zip(shown, values)):
        parts_ax.annotate(f" {human_bytes(fullest[part])}", (value, row), va="center", fontsize=8)
    none = [part for part in parts if fullest[part] <= 0]
    parts_ax.set(yticks=range(len(shown)), yticklabels=shown, xlabel=unit,
                 xlim=(0, max(values) * 1.5) if values else (0, 1),           # room for each bar's label
                 title="fullest device, by part" + (f"\n(0 bytes: {', '.join(none)})" if none else ""))
    parts_ax.invert_yaxis()
    plt.close(fig)
    return fig


def scaling_curve_figure(predictions: Any, title: str = ""):
    """Predicted vs ideal samples/s against GPU count."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    gpus = [p.gpus for p in predictions]
    ax.plot(gpus, [p.ideal_samples_per_s for p in predictions], "--", label="ideal (linear)")
    ax.plot(gpus, [p.samples_per_s for p in predictions], "o-", label="predicted")
    ax.set(xlabel="GPUs", ylabel="samples/s", title=title)
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))      # GPU counts are whole numbers
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)  # outside the data
    ax.grid(alpha=0.3)
    fig.tight_layout()
    plt.close(fig)
    return fig


def sweep_figure(plain: Any, scaled: Any, no_warmup: Any = None):
    """Validation accuracy against global batch, same learning rate vs linear scaling + warm-up (and, given
    ``no_warmup``, linear scaling from the first step: dashed, unlabelled, its numbers are in the table)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    ax.plot([b for b, _ in plain], [a for _, a in plain], "o-", label="same learning rate")
    ax.plot([b for b, _ in scaled], [a for _, a in scaled], "s-", label="linear scaling + warm-up")
    if no_warmup is not None:
        ax.plot([b for b, _ in no_warmup], [a for _, a in no_warmup], "^--", color="C2", alpha=0.8, zorder=1,
                label="linear scaling, no warm-up")
    for series, color, dy in ((plain, "C0", -11), (scaled, "C1", 5)):   # label every point; one series below,
        for b, a in series:                                                # the other above, so labels never overlap
            ax.annotate(f"{a:.3f}", (b, a), textcoords="offset points", xytext=(4, dy), fontsize=7, color=color,
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.3, "alpha": 0.85}, zorder=5)
    batches = sorted({b for b, _ in plain} | {b for b, _ in scaled})
    ax.set(xscale="log", xlabel="global batch", ylabel="validation accuracy", title="fixed number of epochs")
    ax.set_xticks(batches, [str(b) for b in batches])               # plain numbers, not 10^2
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.margins(y=0.15)                                             # room for the labels above the top point
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)  # outside the data
    ax.grid(alpha=0.3)
    fig.tight_layout()
    plt.close(fig)
    return fig


def replica_heatmap(report: Any):
    """Variable x replica heatmap of a ReplicaReport: colour = difference from replica 0, NaN copies in red."""
    import matplotlib.pyplot as plt
    import numpy as np

    grid = np.array([[d if ok else np.nan for ok, d in zip(r.finite, r.max_diff)] for r in report.rows], dtype=float)
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * report.replicas, 0.8 + 0.35 * len(report.rows)))
    cmap = plt.get_cmap("Greys").with_extremes(bad="red")
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, aspect="auto", vmin=0)
    ax.set(xticks=range(report.replicas), xticklabels=[str(i) for i in range(report.replicas)], xlabel="replica",
           yticks=range(len(report.rows)), yticklabels=[r.path for r in report.rows],
           title="difference from replica 0 (red: NaN/inf)")
    ax.tick_params(axis="y", labelsize=8)
    fig.colorbar(image, ax=ax, label="largest |copy - replica 0's copy|")
    fig.tight_layout()
    plt.close(fig)
    return fig


def activity_figure(activity: Any, title: str | None = None, ax: Any = None, whole: bool = False,
                    what: str = "the training steps", number_by: str | None = None):
    """One row per device (device 0 on top), each op a bar coloured by what it does, idle time left
    blank; the input pipeline (tf.data threads, on the host) as a last row when it did any work.
    Shows the steps as they run once started (``DeviceActivity.steady_window``: the set-up and first step before
    the function's longest pause left out, and the axis label says so) unless ``whole`` is true; ``what`` names
    the steps on the axis. ``number_by``: a regular expression with one group, searched in every op's name
    (e.g. ``r"micro_batch_(\\d+)/"`` for ops made under ``tf.name_scope("micro_batch_3")``); each device's span of
    the ops of one group value is labelled with that value, so pieces of work can be followed across rows."""
    import matplotlib.pyplot as plt

    labels, bars = activity.bars()
    rows = labels
    if ax is None:
        fig, ax = plt.subplots(figsize=(9, 0.9 + 0.42 * len(rows)))
    else:
        fig = ax.figure
    colours = dict(zip(KINDS, ("C0", "C1", "C3", "C2", "C7")))
    lo, hi, cut = (*activity.window(), False) if whole else activity.steady_window()
    if not activity.intervals and activity.input_intervals:
        lo = min(s for s, _, _ in activity.input_intervals)
        hi = max(e for _, e, _ in activity.input_intervals)
    pad = max(hi - lo, 1e-6)
    min_width = pad / 1500                        # a 10-microsecond op is still a visible line
    drawn_to = 0.0                                # the axis ends where the last bar does
    for (row, kind), spans in bars.items():
        shown = [((s - lo) * 1e3, max(e - s, min_width) * 1e3) for s, e in spans if e >= lo and s <= hi]
        drawn_to = max([drawn_to] + [min(x + w, pad * 1e3) for x, w in shown])
        ax.broken_barh(shown, (row - 0.38, 0.76), facecolors=colours[kind], linewidth=0)
        if kind == "gradient reduction":           # reductions can last microseconds: mark each one
            ax.plot([x for x, _ in shown], [row - 0.5] * len(shown), linestyle="none", marker="v", markersize=5,
                    color=colours[kind], clip_on=False)
    if number_by is not None:
        import re

        pattern = re.compile(number_by)
        groups: dict[tuple[int, str], list[float]] = {}   # (row, label) -> [busy seconds, busy x centre]
        for device, start, end, op in activity.intervals:
            found = pattern.search(op)
            if found and end >= lo and start <= hi:
                start, end = max(start, lo), min(end, hi)
                weight = groups.setdefault((list(activity.devices).index(device), found.group(1)), [0.0, 0.0])
                weight[0] += end - start
                weight[1] += (end - start) * ((start + end) / 2 - lo)
        for (row, label), (busy, moment) in groups.items():
            if busy > 0:                                 # at the centre of the group's compute, on its bars
                ax.text(moment / busy * 1e3, row, label, ha="center", va="center", fontsize=9, fontweight="bold",
                        color="white")
    ax.set_yticks(range(len(rows)), labels)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, drawn_to * 1.01 if drawn_to > 0 else pad * 1e3)
    kind_text = ("simulated devices: logical CPUs sharing the same cores, so this shows placement and order, "
                 "not GPU speed" if activity.simulated else "GPUs")
    label = "milliseconds"
    if not whole:
        label += f" ({what}" + ("; what ran before them, set-up and first-run ops, left out)" if cut else ")")
    elif what != "the training steps":            # a recording of exactly this work: all of it shown
        label += f" ({what})"
    ax.set_xlabel(label)
    ax.set_title(title or "which device computed what", fontsize=10, loc="left", pad=16)
    ax.text(0.0, 1.02, kind_text, transform=ax.transAxes, ha="left", va="bottom", fontsize=7, color="0.35")
    from matplotlib.patches import Patch

    used = [k for k in KINDS if any(kind == k for _, kind in bars)]     # in the order a step runs them
    names = {"gradient reduction": "gradient reduction (▼)", "input pipeline": "input: tf.data on the host"}
    ax.legend([Patch(color=colours[k]) for k in used], [names.get(k, k) for k in used], loc="upper left",
              bbox_to_anchor=(1.01, 1), fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    plt.close(fig)
    return fig


def activity_comparison(activities: dict[str, Any]):
    """Several device_activity timelines stacked, one titled panel each, on a common time scale."""
    import matplotlib.pyplot as plt

    rows = [len(a.devices) + bool(a.input_intervals) for a in activities.values()]
    fig, axes = plt.subplots(len(activities), 1, figsize=(9, 0.9 * len(activities) + 0.42 * sum(rows)),
                             gridspec_kw={"height_ratios": rows}, squeeze=False)
    for ax, (title, activity) in zip(axes[:, 0], activities.items()):
        activity_figure(activity, title=title, ax=ax)
    widest = max(ax.get_xlim()[1] for ax in axes[:, 0])
    for ax in axes[:, 0]:
        ax.set_xlim(0, widest)                    # the same milliseconds in every panel
    fig.tight_layout()
    plt.close(fig)
    return fig
