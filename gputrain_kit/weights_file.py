"""What a Keras 3 weights file holds, read without loading it (``saving.load_verified``): the variables of a
``.weights.h5`` file, or of the ``model.weights.h5`` inside a ``.keras`` zip, by Keras's own keys
(``layers/dense_1/vars/0``: attribute path, class and position), set against the keys a model would write."""
from __future__ import annotations

import contextlib
import tempfile
import warnings
from pathlib import Path
from typing import Any, Iterator

_OPTIMIZER = "optimizer/"   # the top-level group of the model's optimizer in a Keras 3 weights file

@contextlib.contextmanager
def _weights_file(path: Path) -> Iterator[Any]:
    """The HDF5 file of variables: the file itself (.weights.h5), or model.weights.h5 in a .keras archive."""
    import zipfile

    import h5py

    if path.name.endswith(".keras"):
        with zipfile.ZipFile(path) as archive, archive.open("model.weights.h5") as inner:
            with h5py.File(inner, "r") as f:
                yield f
    else:
        with h5py.File(path, "r") as f:
            yield f


class _Layout:
    """What a Keras 3 weights file holds: each variable's key (``layers/dense_1/vars/0``: attribute path, the
    layer's class and occurrence, never its name) and shape; the name recorded for each group; the
    optimizer's step when its first variable is a scalar integer (Keras's ``iterations``)."""

    def __init__(self, f: Any):
        import h5py

        self.shapes: dict[str, tuple[int, ...]] = {}
        self.names: dict[str, str] = {}

        def visit(key: str, item: Any) -> None:
            if isinstance(item, h5py.Dataset):
                self.shapes[key] = tuple(item.shape)
            elif key.endswith("/vars") and "name" in item.attrs:
                name = item.attrs["name"]
                self.names[key[:-len("/vars")]] = name.decode() if isinstance(name, bytes) else str(name)

        f.visititems(visit)
        first = f.get(_OPTIMIZER + "vars/0")
        self.step = (int(first[()]) if isinstance(first, h5py.Dataset) and first.shape == ()
                     and first.dtype.kind in "iu" else None)

    def layers(self) -> dict[str, tuple[int, ...]]:
        return {k: s for k, s in self.shapes.items() if not k.startswith(_OPTIMIZER)}

    def optimizer(self) -> dict[str, tuple[int, ...]]:
        return {k: s for k, s in self.shapes.items() if k.startswith(_OPTIMIZER)}

    def describe_optimizer(self) -> str:
        name = self.names.get(_OPTIMIZER.rstrip("/"), "")
        step = f" at step {self.step}" if self.step is not None else ""
        return f"optimizer {name!r}{step}, {len(self.optimizer())} variables" if name else \
            f"an optimizer{step}, {len(self.optimizer())} variables"


def _model_layout(model: Any) -> _Layout:
    """The keys this model's variables have in a weights file: found by writing one (Keras's own walk over the
    model), so nested models, containers and optimizers are keyed exactly as a load will look them up."""
    with tempfile.TemporaryDirectory(prefix="gputrain-layout-") as folder:
        probe = Path(folder) / "probe.weights.h5"
        with warnings.catch_warnings():      # writing a scratch file: nothing said here concerns the user's file
            warnings.simplefilter("ignore")
            model.save_weights(str(probe))
        with _weights_file(probe) as f:
            return _Layout(f)


def _groups(keys: list[str], names: dict[str, str]) -> list[str]:
    """'layers/dense_2 (layer 'out', 2 variables)' for each group of the given variable keys, in file order."""
    counts: dict[str, int] = {}
    for key in keys:
        group = key.rsplit("/vars/", 1)[0]
        counts[group] = counts.get(group, 0) + 1
    items = []
    for group, n in counts.items():
        name = names.get(group)
        kind = "optimizer" if group.rsplit("/", 1)[-1] == "optimizer" else "layer"
        items.append(f"{group} ({f'{kind} {name!r}, ' if name else ''}{n} variable{'s' if n > 1 else ''})")
    return items




def _reshaped(wanted: dict[str, tuple[int, ...]], file: _Layout) -> list[str]:
    """"layers/dense/vars/0 (layer 'hidden'): (4, 8) in the model, (2, 8) in the file" for each variable key the
    model and the file both have, in other shapes."""
    items = []
    for key, shape in wanted.items():
        if key in file.shapes and file.shapes[key] != shape:
            name = file.names.get(key.rsplit("/vars/", 1)[0])
            items.append(f"{key}{f' (layer {name!r})' if name else ''}: {shape} in the model, {file.shapes[key]} "
                         "in the file")
    return items
