"""What a worker function takes with it (processes.function_with_helpers, as launch_local_workers sends it):
a Keras layer subclass of another cell, its base class, what its methods and defaults use, a library's names;
module imports before the definitions that need them; a class of a notebook cell, read from the cell; a class
whose source cannot be read, refused with the reason."""
from __future__ import annotations

import json

import keras
import numpy as np
import pytest
from keras.layers import Dense

from gputrain_kit.multiworker import _payload
from conftest import last_json, run_python

WIDTH = 16


def relu_of(x):
    return keras.ops.relu(x)


class Base(keras.layers.Layer):
    scale = 2


class Block(Base):
    def __init__(self, units=WIDTH, **kwargs):
        super().__init__(**kwargs)
        self.dense = Dense(units)

    def call(self, x):
        return relu_of(self.dense(x)) * self.scale


def uses_a_subclassed_layer():
    model = keras.Sequential([keras.Input((8,)), Block()])
    return [int(d) for d in model(np.ones((2, 8))).shape]


def test_a_subclassed_layer_travels_with_its_base_class_constants_helpers_and_imports():
    source = _payload("launch_local_workers", uses_a_subclassed_layer, (), {})["source"]
    lines = source.splitlines()
    first = {name: next(i for i, line in enumerate(lines) if line.startswith(name))
             for name in ("import keras as keras", "WIDTH = 16", "class Base(", "class Block(", "def relu_of(",
                          "from keras.src.layers.core.dense import Dense as Dense", "def uses_a_subclassed_layer(")}
    assert first["import keras as keras"] < first["class Base("] < first["class Block("]
    assert first["WIDTH = 16"] < first["class Block("]            # a default argument: read when the class is made
    assert first["from keras.src.layers.core.dense import Dense as Dense"] < first["class Block("]
    assert "class Layer" not in source                            # the library's base class is imported, not copied
    namespace: dict = {"__name__": "__worker__"}                  # as the worker runs it (gputrain_kit._worker)
    exec(compile(source, "<worker function>", "exec"), namespace)
    assert namespace["uses_a_subclassed_layer"]() == [2, 16]


def only_given_modules():
    return float(np.sum([1, 2]))


def test_a_function_sent_alone_keeps_its_line_numbers():
    source = _payload("launch_local_workers", only_given_modules, (), {})["source"]
    assert source.startswith("def only_given_modules():") and source.endswith("import numpy as np")


Made = type("Made", (), {})


def uses_a_made_class():
    return Made()


def test_a_class_whose_source_cannot_be_read_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"uses_a_made_class\(\) uses the class Made, whose source cannot be read "
                                         r"\(.*no file or notebook cell of this process defines class Made\)"):
        _payload("launch_local_workers", uses_a_made_class, (), {})


NOTEBOOK = r'''
import json
from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()           # a notebook's kernel: cells compiled by IPython, __main__ has no file
cells = ["import inspect, keras, numpy as np\nWIDTH = 16",
         "def relu_of(x):\n    return keras.ops.relu(x)",
         "class Base(keras.layers.Layer):\n    pass",
         "%time x = 1\nclass Block(Base):\n    def __init__(self, **kw):\n        super().__init__(**kw)\n"
         "        self.dense = keras.layers.Dense(WIDTH)\n    def call(self, x):\n        return relu_of(self.dense(x))",
         "def worker():\n    return [int(d) for d in keras.Sequential([keras.Input((8,)), Block()])(np.ones((2, 8))).shape]",
         "try:\n    inspect.getsource(Block)\n    readable = True\nexcept (OSError, TypeError):\n    readable = False\n"
         "from gputrain_kit.multiworker import _payload\n"
         "source = _payload('launch_local_workers', worker, (), {})['source']\n"
         "space = {'__name__': '__worker__'}\nexec(compile(source, '<worker function>', 'exec'), space)\n"
         "shape = space['worker']()"]
for cell in cells:
    shell.run_cell(cell, store_history=True).raise_error()
ns = shell.user_ns
print(json.dumps({"inspect_reads_it": ns["readable"], "shape": ns["shape"], "source": ns["source"]}))
'''


def test_a_class_of_a_notebook_cell_is_read_from_the_cell_that_defined_it():
    """inspect.getsource cannot read a class of a notebook (its module, __main__, has no file): the kit reads it
    from the cell its methods were compiled from, or from the kernel's history for a class without methods."""
    out = last_json(run_python(NOTEBOOK, fresh=True, timeout=120))
    assert out["inspect_reads_it"] is False
    assert out["shape"] == [2, 16]
    assert "class Base(keras.layers.Layer):" in out["source"] and "WIDTH = 16" in out["source"]
    assert json.dumps(out["source"]).count("class Block(Base)") == 1
