"""The memory explorer (notebooks 03 and 08): estimates of each preset model's memory per device against a card,
as ipywidgets over ``memory.estimate_memory``, with ``memory.memory_verdict``'s one sentence.

``gputrain_kit.widgets`` re-exports everything here; the notebooks use ``kit.widgets.MemoryExplorer``.
"""
from __future__ import annotations

import io
from typing import Any

from .memory import TIGHT_SHARE, memory_verdict  # the verdict is logic (memory.py), re-exported here

#: The resolution of the figures the explorers draw as images (Jupyter's inline figures: 100).
PNG_DPI = 100

__all__ = ["MemoryExplorer", "memory_verdict", "PRESET_BATCHES", "TIGHT_SHARE"]


# The batch each MemoryExplorer preset comes with: notebook 03's 96 images for InceptionV3 (the Q&A thread's
# model), 32 for the other large models, notebook 08's 32,768 tokens, the course's 64 digits.
PRESET_BATCHES = {"inception_v3": 96, "dense_stack": 32, "resnet50": 32, "dense_stack_08": 32768, "digits": 64}


class MemoryExplorer:
    """Model preset, batch, device count, strategy and the memory levers (optimizer, precision,
    recomputation, gradient accumulation, ZeRO stage) -> per-device memory bars against a card's size.

    Headless use: set ``.preset/.batch/.devices/.strategy/.capacity/.optimizer/.precision/.remat/
    .accumulation/.zero_stage`` values; read ``.summary.value`` and ``.estimate``. ``levers=False`` folds the
    levers notebook 08 teaches (precision, recomputation, accumulation, ZeRO) into a closed section, for a
    notebook that has not met them yet.
    """

    def __init__(self, preset: str = "InceptionV3 299x299", batch: int = 32, devices: int = 2,
                 strategy: str = "data", capacity_gb: float = 12, optimizer: str = "adam",
                 dtype_policy: str = "float32", remat: bool = False, accumulation_steps: int = 1,
                 zero_stage: int = 0, levers: bool = True):
        import ipywidgets as widgets

        from ._args import require_bool, require_choice, require_int
        from .memory import DTYPE_POLICIES, OPTIMIZER_SLOTS, PRESETS, ZERO_STAGES

        func = "MemoryExplorer"
        batch = require_int(func, "batch", batch, minimum=1)
        require_choice(func, "optimizer", optimizer, OPTIMIZER_SLOTS)
        require_choice(func, "dtype_policy", dtype_policy, DTYPE_POLICIES)
        require_bool(func, "remat", remat)
        accumulation_steps = require_int(func, "accumulation_steps", accumulation_steps, minimum=1)
        require_choice(func, "zero_stage", zero_stage, ZERO_STAGES)
        levers = require_bool(func, "levers", levers)
        wide = {"description_width": "initial"}
        self.preset = widgets.Dropdown(options=list(PRESETS), value=preset,
                                       description="model", style=wide, layout=widgets.Layout(width="380px"))
        # 1 ... 65,536 (tokens, for some models), every preset's own batch, and notebook 03's 4 x 96
        batches = sorted({2 ** i for i in range(17)} | set(PRESET_BATCHES.values()) | {384, batch})
        self.batch = widgets.SelectionSlider(options=batches, value=batch, description="global batch", style=wide)
        self.devices = widgets.IntSlider(value=devices, min=1, max=8, description="devices", style=wide)
        self.strategy = widgets.ToggleButtons(options=["single", "data", "split"], value=strategy,
                                              description="strategy", style=wide)
        self.capacity = widgets.Dropdown(options=[12, 16, 24, 80], value=capacity_gb, description="card (GB)",
                                         style=wide, layout=widgets.Layout(width="160px"))
        self.optimizer = widgets.Dropdown(options=list(OPTIMIZER_SLOTS), value=optimizer, description="optimizer",
                                          style=wide, layout=widgets.Layout(width="200px"))
        self.precision = widgets.ToggleButtons(options=list(DTYPE_POLICIES), value=dtype_policy,
                                               description="precision", style=wide)
        self.remat = widgets.Checkbox(value=remat, description="recomputation (keras.remat segments)", indent=False)
        self.accumulation = widgets.Dropdown(options=sorted({1, 2, 4, 8, 16, accumulation_steps}),
                                             value=accumulation_steps, description="accumulation steps", style=wide,
                                             layout=widgets.Layout(width="200px"))
        self.zero_stage = widgets.Dropdown(options=list(ZERO_STAGES), value=zero_stage,
                                           description="ZeRO (modelled)", style=wide,
                                           layout=widgets.Layout(width="200px"))
        self.summary = widgets.HTML()
        # The figure as a PNG in an Image widget: drawn once per change (an Output displaying the figure
        # drew it twice, to find its tight bounding box, and cleared and re-created the output each time).
        self.plot = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto"))
        self.estimate: Any = None                    # the last MemoryEstimate, None after a refused setting
        self._said_once: list[str] = []              # notes shown after one change only
        self._quiet = False                          # True while the explorer sets a control itself
        for control in (self.batch, self.devices, self.strategy, self.capacity, self.optimizer,
                        self.precision, self.remat, self.accumulation, self.zero_stage):
            control.observe(self._changed, names="value")
        self.preset.observe(self._preset_changed, names="value")
        self.update()
        later = [widgets.HBox([self.accumulation, self.zero_stage]), widgets.HBox([self.precision, self.remat])]
        if levers:
            rows = [widgets.HBox([self.optimizer, *later[0].children]), later[1]]
        else:                                        # notebook 08's levers, folded until the learner gets there
            rows = [self.optimizer, widgets.Accordion(children=[widgets.VBox(later)],
                                                      titles=("more levers (notebook 08)",), selected_index=None)]
        self.widget = widgets.VBox([widgets.HBox([self.preset, self.capacity]),
                                    widgets.HBox([self.batch, self.devices]), self.strategy, *rows,
                                    self.summary, self.plot])

    def _changed(self, change: Any) -> None:
        if self._quiet:
            return
        self._said_once = []
        if change["owner"] is self.strategy and change["new"] != "data" and int(self.zero_stage.value) > 0:
            # ZeRO shards data-parallel state only: reset, and say so once, rather than a greyed-out 3 in effect
            self._said_once.append(f"ZeRO stage {self.zero_stage.value} reset to 0: it shards data-parallel state "
                                   "only (strategy 'data').")
            self._set_quietly(self.zero_stage, 0)
        self.update()

    def _set_quietly(self, control: Any, value: Any) -> None:
        self._quiet = True
        try:
            control.value = value
        finally:
            self._quiet = False

    def _preset_changed(self, _change: Any) -> None:
        # Each preset comes with its usual batch (32 images; 32,768 tokens for notebook 08's model): a
        # batch kept from another model would draw an absurd estimate (InceptionV3 on 32,768 images).
        from .memory import PRESETS
        self._said_once = []
        usual = PRESET_BATCHES.get(PRESETS[self.preset.value])
        if usual is not None and usual != self.batch.value:
            self._set_quietly(self.batch, usual)          # every preset's batch is among the slider's options
            self._said_once.append(f"Global batch set to {usual:,}, the usual batch for this model: move the "
                                   "slider to change it.")
        self.update()

    def _notes(self) -> list[str]:
        """What the controls do not show by themselves: settings that change nothing or that fit refuses, and
        (once, after the change that caused it) a control the explorer set itself."""
        notes = list(self._said_once)
        devices, batch = int(self.devices.value), int(self.batch.value)
        if self.strategy.value == "data" and devices == 1:
            notes.append("Data parallelism on 1 device is the single-device case: move 'devices' up to split the "
                         "batch.")
        elif self.strategy.value == "data" and batch % devices:
            notes.append(f"A global batch of {batch:,} does not split evenly over {devices} devices: Keras 3's fit "
                         "refuses such a first step (notebook 02); the estimate gives every device the larger "
                         "share.")
        return notes

    def update(self) -> None:
        import html

        from .memory import estimate_memory, preset_profile
        from .plots import memory_figure

        devices = 1 if self.strategy.value == "single" else int(self.devices.value)
        self.devices.disabled = self.strategy.value == "single"   # one device: the slider does nothing
        self.zero_stage.disabled = self.strategy.value != "data"  # ZeRO shards data-parallel state only
        try:
            self.estimate = estimate_memory(
                preset_profile(self.preset.value), batch_size=int(self.batch.value), strategy=self.strategy.value,
                devices=devices, optimizer=self.optimizer.value, dtype_policy=self.precision.value,
                remat=bool(self.remat.value), accumulation_steps=int(self.accumulation.value),
                zero_stage=int(self.zero_stage.value) if self.strategy.value == "data" else 0)
        except ValueError as err:
            self.estimate = None
            self.summary.value = f"<p style='color:#b00020'>{html.escape(str(err))}</p>"
            self.plot.layout.display = "none"        # no figure for a refused setting
            return
        levers = self.estimate.assumptions[3:]       # after the three that every estimate states
        summary = (f"<p>{html.escape(memory_verdict(self.estimate, self.capacity.value))}</p>"
                   + "".join(f"<p style='font-size:90%'>{html.escape(a)}</p>" for a in [*levers, *self._notes()]))
        png = io.BytesIO()
        memory_figure(self.estimate, self.capacity.value).savefig(png, format="png", dpi=PNG_DPI)
        # the drawing is the slow part: the text and the figure change together after it, never one without the other
        self.plot.value = png.getvalue()
        self.summary.value = summary
        self.plot.layout.display = None

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
