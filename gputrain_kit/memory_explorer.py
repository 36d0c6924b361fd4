"""The memory explorer (notebooks 03 and 08): estimates of a model's memory per device against a card, as
ipywidgets over ``memory.estimate_memory``, with ``memory.memory_verdict``'s one sentence. The model is a preset
or your own (a built Keras model, or its profile: a list of LayerStat).

``gputrain_kit.widgets`` re-exports everything here; the notebooks use ``kit.widgets.MemoryExplorer``.
"""
from __future__ import annotations

import io
import sys
import warnings
from typing import Any

from .batching import empty_step_fixes, split_batch
from .memory import TIGHT_SHARE, memory_verdict  # the verdict is logic (memory.py), re-exported here

#: The resolution of the figures the explorers draw as images (Jupyter's inline figures: 100).
PNG_DPI = 100

__all__ = ["MemoryExplorer", "memory_verdict", "PRESET_BATCHES", "TIGHT_SHARE", "DEVICE_RANGE", "CARDS_GB",
           "STRATEGIES"]


# The batch each MemoryExplorer preset comes with: notebook 03's 96 images for InceptionV3 (the Q&A thread's
# model), 32 for the other large models, notebook 08's 32,768 tokens, the course's 64 digits.
PRESET_BATCHES = {"inception_v3": 96, "dense_stack": 32, "resnet50": 32, "dense_stack_08": 32768, "digits": 64}
#: The devices slider's range.
DEVICE_RANGE = (1, 8)
#: The cards in the 'card (GB)' dropdown; a capacity_gb given to the explorer is added to them.
CARDS_GB = (12, 16, 24, 80)
#: The strategy buttons, and the other spellings the explorer takes for them.
STRATEGIES = ("single", "data", "split")
_STRATEGY_SYNONYMS = {"mirrored": "data", "mirroredstrategy": "data", "data parallel": "data"}


def _model_label(func: str, preset: Any, dtype_policy: str = "float32") -> tuple[str, list[Any] | None, Any]:
    """The dropdown's entry for ``preset``, your model's profile and your Keras model: a preset's display name or key
    in any case (``'resnet50'`` -> ``'ResNet50 224x224'``; no profile: read when drawn), a built Keras model or a
    function defined with def that builds one, as ``estimate_memory`` takes it (built without weights, under
    ``dtype_policy``; ``'your model (<name>)'``), or a profile (a list of LayerStat). Anything else: the kit's error,
    naming preset."""
    from ._args import ArgumentTypeError, short, typed
    from .memory import PRESETS, LayerStat, profile

    if isinstance(preset, str):
        wanted = " ".join(preset.split()).lower()
        for label, key in PRESETS.items():
            if wanted in (label.lower(), key.lower()):
                return label, None, None
        raise ValueError(f"{func}: preset must be a preset's name or key ({', '.join(map(repr, PRESETS.values()))}) "
                         f"or your model (a built Keras model, a function that builds one, or a list of LayerStat), got "
                         f"{short(preset)}.")
    if isinstance(preset, (list, tuple)):
        odd = next((item for item in preset if not isinstance(item, LayerStat)), None)
        if odd is not None or not preset:
            raise ArgumentTypeError(
                f"{func}: preset as a profile must be a non-empty list of LayerStat (what kit.memory.profile(model) "
                f"returns), got {'an empty list' if not preset else 'a list holding ' + typed(odd)}.")
        return f"your model ({_layers(list(preset))} layers)", list(preset), None
    keras = sys.modules.get("keras")          # not imported yet: then preset is no Keras model either
    model = preset
    if callable(preset) and not isinstance(preset, type) and not hasattr(preset, "weights"):
        if getattr(preset, "__name__", "") == "<lambda>":
            raise ArgumentTypeError(f"{func}: preset as a function must be one defined with def that builds your "
                                    "model (as estimate_memory takes it), got a lambda; or pass the model itself.")
        from .memory import build_abstractly

        try:                                  # your build function: every shape, no weight allocated
            model = build_abstractly(func, preset, dtype_policy)
        except ValueError as err:             # its messages name 'model' or the function: here it is preset
            raise type(err)(f"{func}: preset: {str(err).removeprefix(func + ': ')}") from None
        keras = sys.modules.get("keras")
    if keras is not None and isinstance(model, keras.Model):
        if not model.built:
            raise ValueError(f"{func}: preset is your model {model.name!r}, which is not built yet (no Input, never "
                             "called), so its layers' output sizes are unknown. Start it with keras.Input(shape) "
                             "or call it once on a batch.")
        try:
            stats = profile(model, _caller=func)
        except ValueError as err:             # a subclassed model never called, say: here it is preset
            raise type(err)(f"{func}: preset: {str(err).removeprefix(func + ': ')}") from None
        if not stats:
            raise ValueError(f"{func}: preset is your model {model.name!r}, which has no layers to estimate.")
        return f"your model ({model.name})", stats, model
    given = f"the class {preset.__name__}" if isinstance(preset, type) else typed(preset)
    raise ArgumentTypeError(f"{func}: preset must be a preset's name (e.g. 'resnet50'), a built Keras model (or a "
                            f"function that builds one) or a profile (a list of LayerStat), got {given}.")


def _layers(stats: list[Any]) -> int:
    """The layers a split can give a device each: the profile's entries, less the planner's own ones (the loss
    and the batch), which are no layer of the model."""
    return max(1, sum(getattr(s, "kind", "") != "loss" for s in stats))


def _strategy_key(func: str, strategy: Any) -> tuple[str, int | None]:
    """'single', 'data' or 'split' (any case; 'mirrored' is 'data'), and a tf.distribute strategy's replicas."""
    from ._args import ArgumentTypeError, short

    replicas = getattr(strategy, "num_replicas_in_sync", None)
    if replicas is not None and not isinstance(strategy, str):         # MirroredStrategy: data parallelism
        return "data", int(replicas)
    choices = "'single', 'data' (data parallelism, as MirroredStrategy: 'mirrored' is taken too) or 'split'"
    if not isinstance(strategy, str):
        raise ArgumentTypeError(f"{func}: strategy must be one of {choices}, got {short(strategy)}.")
    wanted = " ".join(strategy.split()).lower()
    wanted = _STRATEGY_SYNONYMS.get(wanted, wanted)
    if wanted not in STRATEGIES:
        raise ValueError(f"{func}: strategy must be one of {choices}, got {short(strategy)}.")
    return wanted, None


class MemoryExplorer:
    """A model (a preset, or your own), batch, device count, strategy and the memory levers (optimizer,
    precision, recomputation, gradient accumulation, ZeRO stage) -> per-device memory bars against a card's size.

    ``preset``: a preset's display name or key (``'resnet50'``, see ``memory.PRESETS``), or your model: a built
    Keras model, a function defined with def that builds one (built without weights, as ``estimate_memory`` takes
    it), or a profile (a list of LayerStat, ``memory.profile(model)``), added to the dropdown as
    "your model (...)" and selected; it comes back with ``batch`` when chosen again. ``batch``: the global batch (default 32, Keras fit's default). ``devices``:
    1 to 8 (default 2, or a strategy's replicas). ``strategy``: 'single', 'data' (or 'mirrored', or a
    tf.distribute strategy), 'split'. ``capacity_gb``: the card in GB, added to the dropdown's cards.
    ``optimizer`` and ``dtype_policy``: as ``estimate_memory`` takes them (a name in any case, a Keras optimizer
    or DTypePolicy; optimizer None: your model's compiled optimizer, or Adam). Every argument is checked before
    a widget is built.

    Headless use: set ``.preset/.batch/.devices/.strategy/.capacity/.optimizer/.precision/.remat/
    .accumulation/.zero_stage`` values; read ``.summary.value`` and ``.estimate``. ``levers=False`` folds the
    levers notebook 08 teaches (precision, recomputation, accumulation, ZeRO) into a closed section, for a
    notebook that has not met them yet.
    """

    def __init__(self, preset: Any = "InceptionV3 299x299", batch: int = 32, devices: int | None = None,
                 strategy: Any = "data", capacity_gb: float = 12, optimizer: Any = None,
                 dtype_policy: Any = "float32", remat: bool = False, accumulation_steps: int = 1,
                 zero_stage: int = 0, levers: bool = True):
        from ._args import ArgumentTypeError, require_bool, require_choice, require_int, short
        from .memory import (DTYPE_POLICIES, OPTIMIZER_SLOTS, PRESETS, ZERO_STAGES, _policy_key,
                             _require_capacity)
        from .optimizer_slots import optimizer_spec

        func = "MemoryExplorer"
        # Every argument checked before a widget is built: the kit's errors, never a widget's TraitError.
        policy = _policy_key(func, dtype_policy)               # first: a build function is built under it
        label, own, model = _model_label(func, preset, policy)
        batch = require_int(func, "batch", batch, minimum=1)
        strategy, replicas = _strategy_key(func, strategy)
        if devices is None:
            devices = replicas if replicas is not None else 2
        else:
            devices = require_int(func, "devices", devices)
            if replicas is not None and devices != replicas:
                raise ValueError(f"{func}: the strategy has {replicas} replica(s) but devices={devices}; leave "
                                 "devices out when you pass a strategy.")
        low, high = DEVICE_RANGE
        if not low <= devices <= high:
            given = f"{devices} (the strategy's replicas)" if replicas is not None else str(devices)
            raise ValueError(f"{func}: devices must be from {low} to {high} (the devices slider's range), got "
                             f"{given}.")
        capacity = _require_capacity(func, capacity_gb)
        capacity_shown: float = int(capacity) if capacity.is_integer() else capacity   # 40.0 reads 40
        said: list[str] = []
        target = model if model is not None else own          # your model: None reads its compiled optimizer
        optimizer_options: list[Any] = [(key, key) for key in OPTIMIZER_SLOTS]
        yours: Any = optimizer                                  # None: the model's compiled optimizer
        if optimizer is None:
            try:
                chosen: Any = optimizer_spec(func, None, target)
            except ValueError:                                  # compiled with one the estimate does not know
                compiled = getattr(target, "optimizer", None)
                compiled = getattr(compiled, "inner_optimizer", compiled)    # a LossScaleOptimizer's own
                chosen = optimizer_spec(func, "adam")
                said.append(f"Your model is compiled with {type(compiled).__name__}, which the estimate does not "
                            "know: Adam shown; choose the optimizer whose slots per parameter match yours.")
            yours = getattr(target, "optimizer", None)
        else:
            chosen = optimizer_spec(func, optimizer, target)
        optimizer_key: Any = chosen.key
        if chosen.label != chosen.key:                         # options that add slots: yours, as it is, first
            optimizer_key = yours
            optimizer_options.insert(0, (f"{chosen.label} (yours)", yours))
        remat = require_bool(func, "remat", remat)
        accumulation_steps = require_int(func, "accumulation_steps", accumulation_steps, minimum=1)
        if batch % accumulation_steps:
            fitting = max(s for s in range(1, min(accumulation_steps, batch) + 1) if batch % s == 0)
            raise ValueError(f"{func}: accumulation_steps={accumulation_steps} does not divide batch={batch}: every "
                             "step must get the same number of samples (measure_memory refuses it too); pass a "
                             f"divisor of {batch}, e.g. accumulation_steps={fitting}.")
        if isinstance(zero_stage, bool):
            raise ArgumentTypeError(f"{func}: zero_stage must be 0, 1, 2 or 3, got {short(zero_stage)}.")
        zero_stage = require_choice(func, "zero_stage", zero_stage, ZERO_STAGES)
        if zero_stage and strategy != "data":
            raise ValueError(f"{func}: zero_stage={zero_stage} shards data-parallel state over the devices; it "
                             f"needs strategy='data', got strategy={strategy!r}.")
        levers = require_bool(func, "levers", levers)

        import ipywidgets as widgets

        self._own: dict[str, list[Any]] = {}                  # your model's entry: its profile
        self._own_batch = batch                               # the batch your model comes back with
        self._profiles: dict[str, list[Any]] = {}             # presets read once
        if own is not None:                                   # read once: every redraw estimates from the profile
            self._own[label] = own
        if strategy == "split" and devices > _layers(self._stats(label)):
            said.append(self._clamp_note(devices, _layers(self._stats(label))))
            devices = _layers(self._stats(label))
        wide = {"description_width": "initial"}
        self.preset = widgets.Dropdown(options=[*self._own, *PRESETS], value=label,
                                       description="model", style=wide, layout=widgets.Layout(width="380px"))
        # 1 ... 65,536 (tokens, for some models), every preset's own batch, and notebook 03's 4 x 96
        batches = sorted({2 ** i for i in range(17)} | set(PRESET_BATCHES.values()) | {384, batch})
        self.batch = widgets.SelectionSlider(options=batches, value=batch, description="global batch", style=wide)
        # Under 'single' the slider shows 1 (disabled) and gets its value back when the strategy changes again.
        self._devices_before_single: int | None = devices if strategy == "single" else None
        self.devices = widgets.IntSlider(value=1 if strategy == "single" else devices, min=low, max=high,
                                         description="devices", style=wide, disabled=strategy == "single")
        self.strategy = widgets.ToggleButtons(options=list(STRATEGIES), value=strategy,
                                              description="strategy", style=wide)
        self.capacity = widgets.Dropdown(options=sorted({*CARDS_GB, capacity_shown}), value=capacity_shown,
                                         description="card (GB)", style=wide, layout=widgets.Layout(width="160px"))
        self.optimizer = widgets.Dropdown(options=optimizer_options, value=optimizer_key,
                                          description="optimizer", style=wide, layout=widgets.Layout(width="200px"))
        self.precision = widgets.ToggleButtons(options=list(DTYPE_POLICIES), value=policy,
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
        self._said_once: list[str] = said            # notes shown after one change only
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
            more = widgets.Accordion(children=[widgets.VBox(later)], selected_index=None)
            more.set_title(0, "more levers (notebook 08)")      # ipywidgets 7 (Colab) and 8 alike
            rows = [self.optimizer, more]
        self.widget = widgets.VBox([widgets.HBox([self.preset, self.capacity]),
                                    widgets.HBox([self.batch, self.devices]), self.strategy, *rows,
                                    self.summary, self.plot])

    def _stats(self, label: str | None = None) -> list[Any]:
        """The profile of a dropdown entry (default: the one selected): your model's, or a preset's, read once."""
        from .memory import preset_profile

        label = self.preset.value if label is None else label
        if label in self._own:
            return self._own[label]
        if label not in self._profiles:
            self._profiles[label] = preset_profile(label)
        return self._profiles[label]

    @staticmethod
    def _clamp_note(asked: int, layers: int) -> str:
        return (f"Split over {asked} devices needs at least {asked} layers (every device holds one or more): this "
                f"model has {layers}; the devices slider was set to {layers}.")

    def _clamp_split(self) -> None:
        """Under 'split', no more devices than the model has layers: the slider set back, and said once."""
        layers = _layers(self._stats())
        if self.strategy.value == "split" and int(self.devices.value) > layers:
            self._said_once.append(self._clamp_note(int(self.devices.value), layers))
            self._set_quietly(self.devices, layers)

    def _changed(self, change: Any) -> None:
        if self._quiet:
            return
        self._said_once = []
        owner = change["owner"]
        if owner is self.strategy:
            if change["new"] == "single":                 # one device: the slider shows it, and keeps the old value
                self._devices_before_single = int(self.devices.value)
                self._set_quietly(self.devices, 1)
            elif change["old"] == "single" and self._devices_before_single is not None:
                self._set_quietly(self.devices, self._devices_before_single)
                self._devices_before_single = None
            if change["new"] != "data" and int(self.zero_stage.value) > 0:
                # ZeRO shards data-parallel state only: reset, and say so once, rather than a greyed-out 3 in effect
                self._said_once.append(f"ZeRO stage {self.zero_stage.value} reset to 0: it shards data-parallel "
                                       "state only (strategy 'data').")
                self._set_quietly(self.zero_stage, 0)
        elif owner is self.devices and self.strategy.value == "single":
            # the slider is disabled under 'single'; set from code, the value waits for another strategy
            self._devices_before_single = int(change["new"])
            self._set_quietly(self.devices, 1)
        self._clamp_split()
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
        # Your model comes back with the batch the explorer was given.
        from .memory import PRESETS
        self._said_once = []
        label = self.preset.value
        usual = self._own_batch if label in self._own else PRESET_BATCHES.get(PRESETS[label])
        if usual is not None and usual != self.batch.value:
            self._set_quietly(self.batch, usual)          # every such batch is among the slider's options
            self._said_once.append(f"Global batch set to {usual:,}, the usual batch for this model: move the "
                                   "slider to change it.")
        self._clamp_split()
        self.update()

    def _notes(self) -> list[str]:
        """What the controls do not show by themselves: settings that change nothing or that fit refuses, and
        (once, after the change that caused it) a control the explorer set itself."""
        notes = list(self._said_once)
        devices, batch, steps = int(self.devices.value), int(self.batch.value), int(self.accumulation.value)
        step = batch // steps                        # the samples of one step (the batch fit gets)
        of_step = (f"Each step's {step:,} sample{'s' if step != 1 else ''} ({batch:,} in {steps} accumulation steps)"
                   if steps > 1 else "")
        if self.strategy.value == "data" and devices == 1:
            notes.append("Data parallelism on 1 device is the single-device case: move 'devices' up to split the "
                         "batch.")
        elif self.strategy.value == "data" and 0 in (split := split_batch(step, devices)):
            fixes = empty_step_fixes(batch, devices, steps, batches=self.batch.options,
                                     accumulations=self.accumulation.options,
                                     devices_choices=range(self.devices.min, self.devices.max + 1))
            idle = split.count(0)
            notes.append(f"{of_step or f'A global batch of {batch:,}'} on {devices} devices: {idle} of them "
                         f"get{'s' if idle == 1 else ''} no sample in every step (split {split}): Keras 3's fit refuses "
                         "such a first step (notebook 02), a custom loop runs it and BatchNormalization's statistics "
                         "turn NaN there (notebook 05). " + (f"Set {', or '.join(fixes)}." if fixes else
                                                             "Only 1 device gives every device data here."))
        elif self.strategy.value == "data" and step % devices:
            notes.append(f"{of_step + ' do' if of_step else f'A global batch of {batch:,} does'} not split evenly "
                         f"over {devices} devices: Keras 3's fit refuses such a first step (notebook 02); the estimate "
                         "gives every device the larger share.")
        return notes

    def _refusal(self) -> str | None:
        """A setting the estimate (and measure_memory) would refuse, in the controls' words; None if none."""
        batch, steps = int(self.batch.value), int(self.accumulation.value)
        if batch % steps:
            fitting = max(s for s in self.accumulation.options if batch % int(s) == 0)
            return (f"{steps} accumulation steps do not divide the global batch of {batch:,}: every step must get "
                    "the same number of samples, and measure_memory refuses such a batch. Set 'accumulation "
                    f"steps' to {fitting}, or the batch to a multiple of {steps}.")
        return None

    def update(self) -> None:
        import html

        from .memory import estimate_memory
        from .plots import memory_figure

        single = self.strategy.value == "single"
        devices = 1 if single else int(self.devices.value)
        self.devices.disabled = single                            # one device: the slider does nothing
        self.zero_stage.disabled = self.strategy.value != "data"  # ZeRO shards data-parallel state only
        refused = self._refusal()
        warned: list[str] = []
        if refused is None:
            try:
                with warnings.catch_warnings(record=True) as caught:    # said below, not on the notebook's stderr
                    warnings.simplefilter("always")
                    self.estimate = estimate_memory(
                        self._stats(), batch_size=int(self.batch.value), strategy=self.strategy.value,
                        devices=devices, optimizer=self.optimizer.value, dtype_policy=self.precision.value,
                        remat=bool(self.remat.value), accumulation_steps=int(self.accumulation.value),
                        zero_stage=int(self.zero_stage.value) if self.strategy.value == "data" else 0)
                # an uneven split or a replica with no sample is said by _notes in the controls' words; any other
                # warning as it is
                from .batching import EmptyReplicaWarning, UnevenBatchWarning

                warned = [str(w.message) for w in caught
                          if not issubclass(w.category, (EmptyReplicaWarning, UnevenBatchWarning))]
            except ValueError as err:                 # a refusal the controls do not foresee: the estimate's words
                refused = str(err)
        if refused is not None:
            self.estimate = None
            self.summary.value = (f"<p style='color:#b00020'>{html.escape(refused)}</p>"
                                  + "".join(f"<p style='font-size:90%'>{html.escape(n)}</p>" for n in self._said_once))
            self.plot.layout.display = "none"        # no figure for a refused setting
            return
        levers = self.estimate.assumptions[3:]       # after the three that every estimate states
        summary = (f"<p>{html.escape(memory_verdict(self.estimate, self.capacity.value))}</p>"
                   + "".join(f"<p style='font-size:90%'>{html.escape(a)}</p>"
                             for a in [*levers, *self._notes(), *warned]))
        png = io.BytesIO()
        memory_figure(self.estimate, self.capacity.value).savefig(png, format="png", dpi=PNG_DPI)
        # the drawing is the slow part: the text and the figure change together after it, never one without the other
        self.plot.value = png.getvalue()
        self.summary.value = summary
        self.plot.layout.display = None

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.widget)
