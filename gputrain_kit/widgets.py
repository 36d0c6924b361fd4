"""The notebooks' widgets: thin ipywidgets shells over logic that lives (and is tested) elsewhere.

Each builder returns a container with its controls and outputs as attributes,
so tests can drive it headless: change ``.value`` of a control, read the output.
"""
from __future__ import annotations

import warnings

from typing import Any

from ._args import short
from .memory_explorer import PNG_DPI, PRESET_BATCHES, TIGHT_SHARE, MemoryExplorer, memory_verdict  # noqa: F401
from .visibility import example_uuids, parse_cuda_visible_devices

__all__ = ["visibility_explorer", "render_visibility", "render_plan", "render_rows", "ScalingExplorer",
           "MemoryExplorer", "memory_verdict", "SplitExplorer", "ScalingModelExplorer"]


def render_visibility(value: str | None, physical: Any, device_order: str | None = None,
                      fastest_first: Any = None) -> str:
    """HTML for one CUDA_VISIBLE_DEVICES value on a machine (an error message for bad input)."""
    try:
        return parse_cuda_visible_devices(value, physical, device_order=device_order,
                                          fastest_first=fastest_first).to_html()
    except ValueError as err:
        import html
        return f"<p style='color:#b00020'>{html.escape(str(err))}</p>"


def visibility_explorer(n_gpus: int = 8, value: str | None = "2,0"):
    """Type a CUDA_VISIBLE_DEVICES value; see which GPU becomes /GPU:i on an imaginary n-GPU server.

    ``n_gpus``: 1 to 16. ``value``: the variable's text, e.g. ``"2,0"`` (None: the variable unset).

    The server mixes two GPU models (:func:`~gputrain_kit.visibility.example_fastest_first`), so the
    CUDA_DEVICE_ORDER toggle changes which board (nvidia-smi's number) an ordinal selects; a UUID
    always selects the same board. Headless: set ``.text/.unset/.order`` values, read ``.table.value``.
    """
    import ipywidgets as widgets

    from .visibility import cuda_numbering, example_fastest_first

    from ._args import ArgumentTypeError, require_int

    func = "visibility_explorer"
    # Checked before a widget is built: the kit's errors, never a Text widget's TraitError.
    n_gpus = require_int(func, "n_gpus", n_gpus)
    if not 1 <= n_gpus <= 16:
        raise ValueError(f"{func}: n_gpus must be an int from 1 to 16, got {short(n_gpus)}.")
    if value is not None and not isinstance(value, str):
        numbers = value if isinstance(value, (list, tuple)) else [value]
        example = (",".join(str(v) for v in numbers)               # 5 -> '5', [2, 0] -> '2,0'
                   if all(isinstance(v, int) and not isinstance(v, bool) for v in numbers) and numbers else "2,0")
        raise ArgumentTypeError(f"{func}: value must be CUDA_VISIBLE_DEVICES' text (a string such as '2,0'), or None "
                                f"for the variable unset; got {short(value)} ({type(value).__name__}). Pass "
                                f"value={example!r}.")
    smi_uuids = example_uuids(n_gpus)          # one per board, in nvidia-smi's (PCI bus) order
    fastest = example_fastest_first(n_gpus)
    newer = set(fastest[:n_gpus - n_gpus // 2])
    text = widgets.Text(value=value or "", description="value:", placeholder="e.g. 2,0 or GPU-d4bb",
                        continuous_update=True, layout=widgets.Layout(width="420px"))
    unset = widgets.Checkbox(value=value is None, description="variable unset", indent=False)
    # Radio buttons, not toggle buttons: their labels are never cut off ("fastest fir...").
    order = widgets.RadioButtons(options=[("CUDA_DEVICE_ORDER unset (fastest first)", "FASTEST_FIRST"),
                                          ("CUDA_DEVICE_ORDER=PCI_BUS_ID", "PCI_BUS_ID")],
                                 value="FASTEST_FIRST", layout=widgets.Layout(width="auto"))
    table = widgets.HTML()
    legend = widgets.HTML(
        "<details><summary>this imaginary server's GPUs (nvidia-smi's numbers and UUIDs)</summary><pre>" +
        "\n".join(f"nvidia-smi GPU {i}: {'newer, faster' if i in newer else 'older, slower'} model, {u}"
                   for i, u in enumerate(smi_uuids)) + "</pre></details>")

    def update(_change: Any = None) -> None:
        text.disabled = unset.value
        device_order = None if order.value == "FASTEST_FIRST" else order.value
        numbering = cuda_numbering(n_gpus, device_order, fastest)
        cuda_uuids = [smi_uuids[k] for k in numbering if k is not None]      # UUIDs indexed by CUDA's numbers
        table.value = render_visibility(None if unset.value else text.value, cuda_uuids, device_order, fastest)

    for control in (text, unset, order):
        control.observe(update, names="value")
    update()
    box = widgets.VBox([widgets.HBox([text, unset]), order, table, legend])
    box.text, box.unset, box.order, box.table = text, unset, order, table
    return box


def render_plan(plan: list[list[int]], max_groups: int = 6) -> str:
    """HTML of a per-step split: identical steps grouped, empty replica slots in red, then the verdict."""
    import html

    from .batching import describe_plan, plan_verdict

    def cells(sizes: list[int]) -> str:
        return "".join(
            f"<td style='padding:2px 8px;{'background:#f8d7da;font-weight:bold' if s == 0 else 'background:#e6f4ea'}'>"
            f"{s}</td>" for s in sizes)

    groups = describe_plan(plan)
    shown = groups if len(groups) <= max_groups else groups[:max_groups - 1] + groups[-1:]
    rows = []
    for first, last, sizes in shown:
        label = f"step {first}" if first == last else f"steps {first}-{last}"
        rows.append(f"<tr><td style='padding:2px 8px;white-space:nowrap'>{label}</td>{cells(sizes)}</tr>")
    header = "".join(f"<th style='padding:2px 8px;white-space:nowrap'>replica {i}</th>"
                     for i in range(len(plan[0]))) if plan else ""
    return (f"<div style='overflow-x:auto'><table><tr><th></th>{header}</tr>{''.join(rows)}</table></div>"
            f"<p>{html.escape(plan_verdict(plan))}</p>")        # a wide table scrolls; the verdict wraps


def render_rows(rows: list[dict[str, Any]]) -> str:
    """HTML results table, newest last."""
    import html

    if not rows:
        return "<p>No runs yet: choose values and press Run.</p>"
    keys = list(rows[0])
    head = "".join(f"<th>{html.escape(k)}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{html.escape('-' if r.get(k) is None else str(r.get(k)))}</td>" for k in keys) + "</tr>"
                   for r in rows)
    return f"<table class='scaling-results'><tr>{head}</tr>{body}</table>"


class ScalingExplorer:
    """GPU-count x batch-size explorer: choose replicas and a batch, press Run, watch the table grow.

    Headless use (tests): set ``.replicas.value``, ``.batch.value``, ``.mode.value``,
    call ``.run()``, read ``.rows`` / ``.table.value``.
    """

    def __init__(self, epochs: int = 3, batch: int = 64, mode: str = "per replica"):
        import ipywidgets as widgets

        from . import data
        from .devices import device_names, current

        if mode not in ("per replica", "global"):
            raise ValueError(f"ScalingExplorer: mode must be 'per replica' or 'global', got {short(mode)}.")
        self.n_devices = len(device_names())
        self.epochs = epochs
        self.n_train = len(data.digits().train[0])
        report = current()
        self.rows: list[dict[str, Any]] = []
        wide = {"description_width": "initial"}              # labels in full, never "global bat..."
        self.replicas = widgets.IntSlider(value=self.n_devices, min=1, max=self.n_devices, description="replicas",
                                          style=wide)
        self.batch = widgets.BoundedIntText(value=batch, min=1, max=self.n_train, description="batch", style=wide)
        self.mode = widgets.ToggleButtons(options=["per replica", "global"], value=mode, description="batch is",
                                          style=wide)
        self.button = widgets.Button(description="Run", button_style="primary", icon="play")
        self.progress = widgets.IntProgress(value=0, min=0, max=epochs, description=f"epoch 0 of {epochs}",
                                            style=wide)
        self.status = widgets.HTML()
        self.split = widgets.HTML()
        self.table = widgets.HTML(render_rows([]))
        self.plot = widgets.Output()
        self.timeline = widgets.Output()        # which device computed what in the last run
        self.activity = None
        self.timeline_figure = None
        kind = ("<b>Simulated devices</b>: every replica shares the same CPU cores, so more replicas are "
                "<i>not</i> expected to be faster; timings show overhead, not GPU speed-ups, and vary from run "
                "to run (run a setting twice before comparing)."
                if report is None or report.simulated else
                "<b>Real GPUs</b>: timings are this machine's GPUs.")
        self.kind = widgets.HTML(kind)
        for control in (self.replicas, self.batch, self.mode):
            control.observe(lambda _change: self.preview(), names="value")
        self.button.on_click(lambda _button: self.run())
        self.preview()
        self.widget = widgets.VBox([self.kind, widgets.HBox([self.replicas, self.batch]), self.mode,
                                    widgets.HBox([self.button, self.progress]), self.status, self.split,
                                    self.table, self.plot, self.timeline])

    def global_batch(self) -> int:
        """The global batch the current controls mean."""
        b = int(self.batch.value)
        return b * int(self.replicas.value) if self.mode.value == "per replica" else b

    def batch_limit(self) -> int:
        """The largest batch the box takes: the training set's size as a global batch, and per replica the
        most that keeps the global batch within it (n_train // replicas). A larger global batch would make the
        epoch one partial step, whatever its size, and could split unevenly where the box's number divides."""
        if self.mode.value == "per replica":
            return max(1, self.n_train // int(self.replicas.value))
        return self.n_train

    def preview(self) -> None:
        """Redraw the per-step split for the current controls (pure Python: instant); the last run's status
        (a refusal, "done.") belongs to settings no longer shown, so it is cleared."""
        from .batching import ArgumentOrderWarning, plan_batches

        if not self.button.disabled:
            self.status.value = ""
        limit = self.batch_limit()
        if self.batch.max != limit:
            self.batch.max = limit                 # cuts a larger number to the limit, which redraws once more
            if int(self.batch.value) > limit:
                self.batch.value = limit

        with warnings.catch_warnings():   # the table shows an empty replica: no warning text under it
            warnings.simplefilter("ignore", ArgumentOrderWarning)
            plan = plan_batches(self.n_train, self.global_batch(), int(self.replicas.value))
        steps = f"{len(plan)} step{'s' if len(plan) != 1 else ''} per epoch"
        if int(self.batch.value) < limit:
            cut = ""
        elif self.mode.value == "per replica":
            cut = (f" (per replica, the batch box stops at {limit}: {limit} x {self.replicas.value} replica(s) "
                   f"stays within the {self.n_train} training samples; a larger number is cut to it)")
        else:
            cut = f" (the batch box stops at {limit}, the training set's size: a larger number is cut to it)"
        self.split.value = (f"<p>{self.n_train} training samples, global batch {self.global_batch()} over "
                            f"{self.replicas.value} replica(s): {steps}{cut}.</p>" + render_plan(plan))

    def run(self) -> dict[str, Any]:
        """Train with the current controls, append a row, redraw table and plot; return the row."""
        from .batching import ArgumentOrderWarning
        from .training import UnevenBatchError, train_digits

        replicas, global_batch = int(self.replicas.value), self.global_batch()
        self.button.disabled = True
        self.progress.value = 0
        self.progress.description = f"epoch 0 of {self.epochs}"
        self.status.value = f"training on {replicas} replica(s), global batch {global_batch}..."

        def on_epoch(done: int, total: int) -> None:
            self.progress.value = done
            self.progress.description = f"epoch {done} of {total}"

        try:
            with warnings.catch_warnings():   # a batch under the replica count: the split above shows it, as preview()
                warnings.simplefilter("ignore", ArgumentOrderWarning)
                result = train_digits(replicas, global_batch, epochs=self.epochs, on_epoch=on_epoch, activity=True)
            row, self.activity = result.row(), result.activity
            self.status.value = "done."
        except UnevenBatchError as err:
            self.activity = None
            row = {"replicas": replicas, "global batch": global_batch, "per replica": -(-global_batch // replicas),
                   "steps/epoch": None, "epoch time (s)": None, "samples/s": None, "val accuracy": None,
                   "devices": "refused"}
            self.status.value = f"<span style='color:#b00020'>{err}</span>"
        finally:
            self.button.disabled = False
        self.rows.append(row)
        self.table.value = render_rows(self.rows)
        self.plot.clear_output(wait=True)
        with self.plot:
            from IPython.display import display
            from .plots import scaling_figure
            display(scaling_figure(self.rows))
        self.timeline.clear_output(wait=True)
        self.timeline_figure = None
        if self.activity is not None and row["val accuracy"] is not None:
            self.timeline_figure = self.activity.plot(
                title=f"last run: {replicas} replica(s), global batch {global_batch}, steps 2-4 of epoch 1")
            with self.timeline:
                display(self.timeline_figure)
        return row

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)


class SplitExplorer:
    """Input path, dataset size, global batch and replica count -> every step's split, empty slots in red, a verdict.
    ``shard_policy``: the dataset's tf.data auto-shard policy, "auto" (the default; Keras's "data" for NumPy arrays
    splits alike) or "off" (as "file" and "hint" split), which changes the "dataset" path's split (``plan_batches``).

    Headless use: set ``.via/.n_samples/.global_batch/.replicas/.drop/.shard_policy`` values, read ``.output.value``.
    """

    def __init__(self, n_samples: int = 1030, global_batch: int = 64, replicas: int = 4, via: str = "dataset",
                 shard_policy: str = "auto"):
        import ipywidgets as widgets

        from ._args import require_choice
        from .batching import VIAS

        require_choice("SplitExplorer", "via", via, VIAS)
        require_choice("SplitExplorer", "shard_policy", shard_policy, ("auto", "off"))
        self.via = widgets.RadioButtons(options=[("fit / distribute_dataset", "dataset"),       # labels in full
                                                 ("distribute_datasets_from_function", "function")],
                                        value=via, description="input path", style={"description_width": "initial"},
                                        layout=widgets.Layout(width="auto"))
        wide = {"description_width": "initial"}              # labels in full, never "global bat..."
        self.n_samples = widgets.BoundedIntText(value=n_samples, min=1, max=100_000, description="samples",
                                                style=wide)      # at most 100,000 steps: each update well under 1 s
        self.global_batch = widgets.IntSlider(value=global_batch, min=1, max=1024, description="global batch",
                                              style=wide)
        self.replicas = widgets.IntSlider(value=replicas, min=1, max=16, description="replicas", style=wide)
        self.drop = widgets.Checkbox(value=False, description="drop_remainder", indent=False)
        self.shard_policy = widgets.RadioButtons(
            options=[("AUTO (default) or DATA", "auto"), ("OFF, FILE or HINT", "off")], value=shard_policy,
            description="dataset's auto_shard_policy", style=wide, layout=widgets.Layout(width="auto"))
        self.output = widgets.HTML()
        for control in (self.n_samples, self.global_batch, self.replicas, self.drop, self.via, self.shard_policy):
            control.observe(lambda _change: self.update(), names="value")
        self.update()
        self.widget = widgets.VBox([widgets.HBox([self.via, self.shard_policy]),
                                    widgets.HBox([self.n_samples, self.drop]),
                                    widgets.HBox([self.global_batch, self.replicas]), self.output])

    def update(self) -> None:
        import html

        from .batching import ArgumentOrderWarning, plan_batches

        try:
            with warnings.catch_warnings():                              # the table shows what it means
                warnings.simplefilter("ignore", ArgumentOrderWarning)
                plan = plan_batches(int(self.n_samples.value), int(self.global_batch.value),
                                    int(self.replicas.value), bool(self.drop.value), via=self.via.value,
                                    shard_policy=self.shard_policy.value)
        except ValueError as err:
            self.output.value = f"<p style='color:#b00020'>{html.escape(str(err))}</p>"
            return
        if not plan:
            self.output.value = "<p>drop_remainder leaves no step at all: the dataset is smaller than one batch.</p>"
            return
        from .batching import empty_slots

        tip = ""
        if empty_slots(plan) and not self.drop.value:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ArgumentOrderWarning)
                dropped = plan_batches(int(self.n_samples.value), int(self.global_batch.value),
                                       int(self.replicas.value), True, via=self.via.value,
                                       shard_policy=self.shard_policy.value)
            tip = ("<p><i>Tick drop_remainder to see the fix: the step that leaves a replica empty is dropped.</i></p>"
                   if dropped and not empty_slots(dropped) else
                   "<p><i>Every full step leaves a replica empty: drop_remainder cannot help; use a global batch that "
                   "is a multiple of the replica count.</i></p>" if dropped else "")
        clamped = ""
        if int(self.n_samples.value) == self.n_samples.max:
            clamped = f" (the explorer takes at most {self.n_samples.max:,} samples)"
        shown = render_plan(plan)
        if self.via.value == "dataset":    # fit refuses an uneven first step: say that, not what a later step does
            from .batching import plan_verdict
            from .replicas import first_step_verdict

            refused = first_step_verdict(plan, int(self.global_batch.value), int(self.replicas.value),
                                         int(self.n_samples.value))
            if refused and self.shard_policy.value == "off":   # its custom-loop part assumes the default split
                refused = refused.split(" A custom loop")[0] + " Fix: a global batch that is a multiple of the " \
                    "replica count."
            if refused:
                shown = shown.replace(f"<p>{html.escape(plan_verdict(plan))}</p>", f"<p>{html.escape(refused)}</p>")
                tip = ""                   # its Fix says what to change; drop_remainder alone never is
        self.shard_policy.disabled = self.via.value == "function"     # no rebatching there: the policy splits alike
        self.output.value = f"<p>{len(plan)} step(s) per epoch{clamped}.</p>" + shown + tip

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)


class ScalingModelExplorer:
    """GPU count, per-GPU batch, network and link -> predicted samples/s and efficiency, with the ideal line.

    Headless use: set ``.gpus/.batch/.network/.link/.overlap`` values; read ``.summary.value`` and
    ``.predictions``.
    """

    def __init__(self, network: str = "VGG-16", link: str = "PCIe 3.0 x16 (one server)", gpus: int = 8,
                 batch: int = 64, overlap: float = 0.1):
        import ipywidgets as widgets

        from .scaling import LINKS, NETWORKS

        wide = {"description_width": "initial"}              # labels and link names in full
        self.network = widgets.Dropdown(options=list(NETWORKS), value=network, description="network", style=wide)
        self.link = widgets.Dropdown(options=list(LINKS), value=link, description="link", style=wide,
                                     layout=widgets.Layout(width="330px"))
        self.gpus = widgets.IntSlider(value=gpus, min=1, max=64, description="GPUs", style=wide)
        self.batch = widgets.IntSlider(value=batch, min=8, max=256, step=8, description="per-GPU batch", style=wide)
        self.overlap = widgets.FloatSlider(value=overlap, min=0.0, max=1.0, step=0.05, description="overlap",
                                           style=wide)
        self.summary = widgets.HTML()
        self.plot = widgets.Output()
        self.predictions: list = []
        for control in (self.network, self.link, self.gpus, self.batch, self.overlap):
            control.observe(lambda _change: self.update(), names="value")
        self.update()
        self.widget = widgets.VBox([widgets.HBox([self.network, self.link]), widgets.HBox([self.gpus, self.batch]),
                                    self.overlap, self.summary, self.plot])

    def update(self) -> None:
        import html

        from .plots import scaling_curve_figure
        from .scaling import predict_curve

        self.predictions = predict_curve(self.network.value, self.link.value, int(self.batch.value),
                                         int(self.gpus.value), float(self.overlap.value))
        self.link.disabled = self.overlap.disabled = int(self.gpus.value) == 1   # one GPU: nothing to communicate
        self.summary.value = (f"<p>{html.escape(repr(self.predictions[-1]))}</p><p><i>A model of real GPUs "
                              "from the stated assumptions, not a measurement of this machine.</i></p>")
        self.plot.clear_output(wait=True)
        with self.plot:
            from IPython.display import display
            display(scaling_curve_figure(self.predictions, f"{self.network.value} over {self.link.value}"))

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)


class MeshExplorer:
    """Notebook 09: 8 devices arranged as a (batch, model) mesh, and a model's variables laid out on it: how many
    bytes each device holds when every 2-D (Dense) kernel's columns are cut over "model", and which kernels stay
    whole (columns that do not divide, which Keras refuses to build; kernels that are not 2-D).
    ``variables``: (path, shape, bytes per value) of each variable, e.g.
    ``[(v.path, tuple(v.shape), 4) for v in model.weights]``. Arithmetic only (``sharding.mesh_bytes``; the
    notebook measures the same on real arrays). Headless: set ``.mesh`` / ``.shard`` values, read
    ``.per_device`` and ``.summary.value``."""

    def __init__(self, variables: list, mesh: tuple[int, int] = (2, 4), shard: bool = True):
        import ipywidgets as widgets

        from .sharding import MESHES_8

        if not isinstance(variables, list) or not variables:
            raise ValueError("MeshExplorer: variables must be a non-empty list of (path, shape, bytes per value), "
                             f"e.g. [(v.path, tuple(v.shape), 4) for v in model.weights]; got {short(variables)}.")
        if tuple(mesh) not in MESHES_8:
            raise ValueError(f"MeshExplorer: mesh must be one of {list(MESHES_8)} (batch, model), got {short(mesh)}.")
        self.variables = [(str(p), tuple(int(d) for d in s), int(b)) for p, s, b in variables]
        self.mesh = widgets.RadioButtons(options=[(f"{b} x {m}  (batch x model)", (b, m)) for b, m in MESHES_8],
                                         value=tuple(mesh), description="mesh", layout=widgets.Layout(width="auto"))
        self.shard = widgets.Checkbox(value=shard, description="split each 2-D kernel's columns over 'model'",
                                      indent=False)
        self.summary = widgets.HTML()
        self.per_device = 0
        for control in (self.mesh, self.shard):
            control.observe(lambda _change: self.update(), names="value")
        self.update()
        self.widget = widgets.VBox([widgets.HBox([self.mesh, self.shard]), self.summary])

    def update(self) -> None:
        import html

        from .plots import human_bytes
        from .sharding import kernels_not_2d, mesh_bytes

        batch, model = self.mesh.value
        self.per_device, full, refused = mesh_bytes(self.variables, model, self.shard.value)
        ratio = full / self.per_device
        holds = (f"<b>{ratio:.2f}x</b> less" if ratio > 1.005 else "<b>a full copy</b>: nothing is cut")
        split = self.shard.value and model > 1 and ratio > 1.005
        rows = [f"each of the 8 devices holds <b>{human_bytes(self.per_device)}</b> of variables, a full copy is "
                f"{human_bytes(full)}: {holds}",
                f"a global batch is cut into {batch} slice(s) along 'batch'; "
                + (f"each slice is computed by the {model} device(s) of its 'model' row together, each holding "
                   "its share of every kernel" if split else
                   f"the {model} devices of a 'model' row each hold a full copy and compute the same slice "
                   "(nothing is divided among them)" if model > 1 else
                   "each device computes its slice with its own full copy")]
        if refused:
            rows.append("counted whole, columns that do not divide: a LayoutMap naming such a kernel makes Keras "
                        "raise IndivisibleError when the model is built, so leave it out of the map and it stays "
                        "whole: " + html.escape("; ".join(refused)))
        not_2d = kernels_not_2d(self.variables) if self.shard.value and model > 1 else []
        if not_2d:
            rows.append("counted whole, not 2-D: only a Dense kernel's columns are split here ((None, 'model') would "
                        "cut such a kernel's axis 1, e.g. a convolution's width): " + html.escape("; ".join(not_2d)))
        self.summary.value = "<ul>" + "".join(f"<li>{r}</li>" for r in rows) + "</ul>"

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
