"""check_layout_map's advice for a key that matches nothing (a review found it fixed): the prefix advice
"start the key with '(.*/)?'" only where a prefixed key does match a path of the model, with real paths as its
examples; a key that already has the prefix, or that no prefix helps (a conv key on a transformer, an attention key
on a CNN), gets the model's real paths instead, and never a path the model does not have."""
from __future__ import annotations

import re

import pytest

from conftest import last_json, run_python
from support import JAX_MODELS

CHILD = '''
import json, gputrain_kit as kit
kit.setup(devices=1, backend="jax")
import keras
from keras import distribution
''' + JAX_MODELS + '''
def cnn(name="cnn"):
    images = keras.Input((8, 8, 1))
    h = keras.layers.Conv2D(4, 3, name="conv2d")(images)
    h = keras.layers.BatchNormalization(name="bn")(h)
    out = keras.layers.Dense(3, name="head")(keras.layers.Flatten()(h))
    return keras.Model(images, out, name=name)

def fn(name="fn"):
    inputs = keras.Input((4,))
    return keras.Model(inputs, keras.layers.Dense(2, name="d1")(inputs), name=name)

class Sub(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.d1 = keras.layers.Dense(4, name="d1")
        self.d2 = keras.layers.Dense(2, name="d2")

    def call(self, x):
        return self.d2(self.d1(x))

sub = Sub(name="sub")
sub(keras.ops.zeros((1, 3)))

class Early(keras.Model):
    """d1 built in __init__ (outside the model's name scope), d2 at the first call."""
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.d1 = keras.layers.Dense(4, name="d1")
        self.d1.build((None, 3))
        self.d2 = keras.layers.Dense(2, name="d2")

    def call(self, x):
        return self.d2(self.d1(x))

early = Early(name="early")
early(keras.ops.zeros((1, 3)))
models = {"mlp": mlp(), "block": block(), "cnn": cnn(), "fn": fn(), "sub": sub, "early": early}
cases = {"mlp: no prefix": ("mlp", ["d.*/kernel"]),
         "sub: no prefix": ("sub", ["d.*/kernel"]),
         "early: the model's name first": ("early", ["early/d1/kernel"]),
         "fn: the model's name first": ("fn", ["fn/d[0-9]+/kernel"]),
         "block: the model's name first": ("block", ["block/ff.*/kernel"]),
         "block: a conv key, prefixed": ("block", ["(.*/)?conv2d.*/kernel"]),
         "cnn: an attention key, prefixed": ("cnn", ["(.*/)?(query|key|value)/kernel"]),
         "cnn: an attention key, no prefix": ("cnn", ["attention/query/kernel"]),
         "mlp: two keys": ("mlp", ["d.*/kernel", "(.*/)?conv2d/kernel"]),
         "mlp: all match": ("mlp", ["(.*/)?d[0-9]+/kernel"])}
out = {"paths": {name: [v.path for v in model.weights] for name, model in models.items()}}
for case, (name, keys) in cases.items():
    layouts = distribution.LayoutMap(None)
    for key in keys:
        layouts[key] = (None, "model")
    try:
        out[case] = {"ok": kit.sharding.check_layout_map(models[name], layouts)}
    except kit.sharding.LayoutError as err:
        out[case] = {"message": str(err)}
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def answers():
    return last_json(run_python(CHILD, env={"KERAS_BACKEND": "jax"}))   # a fresh interpreter: JAX from the start


def _quoted(message: str) -> set[str]:
    return set(re.findall(r"'([^']*)'", message))


def _no_made_up_path(message: str, paths: list[str], keys: tuple[str, ...] = ()) -> None:
    """Every quoted string that looks like a variable path (a '/' and no regex), other than the keys given, is one
    of the model's."""
    for quoted in _quoted(message) - set(keys):
        if "/" in quoted and not re.search(r"[.*()?|\[\]+]", quoted):
            assert quoted in paths, (quoted, message)


@pytest.mark.parametrize("case, model, fixed", [
    ("mlp: no prefix", "mlp", "'(.*/)?d.*/kernel' matches 'mlp/d1/kernel', 'mlp/d2/kernel', 'mlp/d3/kernel'"),
    ("sub: no prefix", "sub", "'(.*/)?d.*/kernel' matches 'sub/d1/kernel', 'sub/d2/kernel'"),
    ("fn: the model's name first", "fn", "put '(.*/)?' in place of 'fn/': '(.*/)?d[0-9]+/kernel' matches 'd1/kernel'"),
    ("block: the model's name first", "block", "'(.*/)?ff.*/kernel' matches 'ff1/kernel', 'ff2/kernel'"),
])
def test_the_prefix_advice_where_a_prefixed_key_matches(answers, case, model, fixed):
    message = answers[case]["message"]
    assert message.startswith("check_layout_map: 1 LayoutMap key(s) match no variable of " + model)
    assert "Fix: " in message and fixed in message
    starts = all(p.startswith(model + "/") for p in answers["paths"][model])
    assert (f"paths start with its name '{model}'" in message) == starts
    assert (f"paths do not start with its name '{model}'" in message) == (not starts)
    _no_made_up_path(message, answers["paths"][model])


@pytest.mark.parametrize("case, model", [("block: a conv key, prefixed", "block"),
                                         ("cnn: an attention key, prefixed", "cnn"),
                                         ("cnn: an attention key, no prefix", "cnn")])
def test_real_paths_where_no_prefix_helps(answers, case, model):
    """The review's cases: '(.*/)?conv2d.*/kernel' on a functional transformer and '(.*/)?(query|key|value)/kernel'
    on a CNN were told to start the key with '(.*/)?', which they did, with paths neither model has."""
    message, paths = answers[case]["message"], answers["paths"][model]
    assert "start the key with" not in message and "in place of" not in message
    assert "No path of this model matches it" in message
    assert ("it already starts with '(.*/)?'" in message) == case.endswith(", prefixed")
    assert all(repr(p) in message for p in paths[:8])
    assert "Fix: write the key from those paths" in message
    _no_made_up_path(message, paths, ("attention/query/kernel",))


def test_each_key_gets_its_own_advice(answers):
    message = answers["mlp: two keys"]["message"]
    assert "2 LayoutMap key(s)" in message
    assert "For 'd.*/kernel': " in message and "For '(.*/)?conv2d/kernel': " in message
    assert message.count("Fix: ") == 2
    assert message.index("start the key with") < message.index("No path of this model")
    _no_made_up_path(message, answers["paths"]["mlp"])


def test_a_map_whose_keys_all_match_passes(answers):
    assert answers["mlp: all match"]["ok"] == {"(.*/)?d[0-9]+/kernel": ["mlp/d1/kernel", "mlp/d2/kernel",
                                                                       "mlp/d3/kernel"]}


def test_the_message_names_sequential_and_subclassed_models_as_the_ones_with_their_name_first(answers):
    """Tenth read (issue 44): a subclassed model's paths start with its name too ('sub/d1/kernel'), and the message
    said only "a Sequential model built fresh has its name first"."""
    assert all(p.startswith("sub/") for p in answers["paths"]["sub"])
    for case in ("sub: no prefix", "mlp: no prefix", "fn: the model's name first"):
        assert ("(a Sequential or a subclassed model built fresh has its name first, except for a layer it builds "
                "in its __init__; a functional or a reloaded one has not)") in answers[case]["message"], case


def test_a_subclassed_models_layer_built_in_init_has_no_name_prefix_and_the_message_says_some_paths(answers):
    """Eleventh read: a layer a subclassed model builds in its __init__ is built outside the model's name scope, so
    its paths lack the name ('d1/kernel' beside 'early/d2/kernel'); the message says some paths start with it."""
    assert answers["paths"]["early"] == ["d1/kernel", "d1/bias", "early/d2/kernel", "early/d2/bias"]
    message = answers["early: the model's name first"]["message"]
    assert "Some of this model's paths start with its name 'early' and some do not" in message
    assert "put '(.*/)?' in place of 'early/': '(.*/)?d1/kernel' matches 'd1/kernel' here" in message
