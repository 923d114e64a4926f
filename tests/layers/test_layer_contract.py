"""One contract test run over every public layer of tf_transformer.layers: config mirrors __init__ and
round-trips, weights transfer, registered serialization, documented and runnable docstring, named sublayers."""

import doctest
import importlib
import inspect
import pathlib
import re

import keras
import numpy as np
import pytest
from keras.ops import convert_to_numpy

import tf_transformer.layers as layers_package
from tf_transformer.layers import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    FeedForward,
    LearnedPositionEmbedding,
    MultiHeadAttention,
    SinusoidalPositionEncoding,
    TokenEmbedding,
)

BASE_CONFIG_KEYS = {"name", "trainable", "dtype"}
RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 5, 8)).astype(np.float32)
MEMORY = RNG.normal(size=(2, 6, 8)).astype(np.float32)
IDS = np.array([[3, 1, 4, 1, 0], [5, 9, 2, 0, 0]], np.int32)
STACK_KWARGS = dict(
    d_model=8,
    num_heads=2,
    d_ff=16,
    dropout=0.2,
    attention_dropout=0.1,
    d_k=3,
    norm_first=True,
    attention_window=2,
    layer_norm_epsilon=1e-5,
    activation="gelu",
    activation_dropout=0.1,
)

# (class, non-default init kwargs, call arguments)
CASES = [
    (
        MultiHeadAttention,
        dict(num_heads=2, d_model=8, d_k=3, attention_dropout=0.1, attention_window=1, use_bias=False),
        (X,),
    ),
    (SinusoidalPositionEncoding, dict(max_length=7, d_model=8), (X,)),
    (LearnedPositionEmbedding, dict(max_length=7, d_model=8), (X,)),
    (TokenEmbedding, dict(vocab_size=11, d_model=8, scale=False), (IDS,)),
    (FeedForward, dict(d_model=8, d_ff=16, activation="gelu", activation_dropout=0.1), (X,)),
    (EncoderLayer, STACK_KWARGS, (X,)),
    (Encoder, dict(num_layers=2, **STACK_KWARGS), (X,)),
    (DecoderLayer, STACK_KWARGS, (X, MEMORY)),
    (Decoder, dict(num_layers=2, **STACK_KWARGS), (X, MEMORY)),
]
CASE_IDS = [cls.__name__ for cls, _, _ in CASES]
contract = pytest.mark.parametrize("cls,kwargs,args", CASES, ids=CASE_IDS)


def init_parameters(cls):
    return [
        name
        for name, parameter in inspect.signature(cls.__init__).parameters.items()
        if name != "self" and parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL)
    ]


def test_cases_cover_every_public_layer():
    public_layers = {
        obj
        for name in layers_package.__all__
        if inspect.isclass(obj := getattr(layers_package, name)) and issubclass(obj, keras.layers.Layer)
    }
    assert public_layers == {cls for cls, _, _ in CASES}


@contract
def test_config_mirrors_init(cls, kwargs, args):
    layer = cls(**kwargs)
    config = layer.get_config()
    assert BASE_CONFIG_KEYS <= set(config)
    own = {key: value for key, value in config.items() if key not in BASE_CONFIG_KEYS}
    assert set(own) == set(init_parameters(cls))
    for key, value in own.items():
        assert value == getattr(layer, key), key
    for key, value in kwargs.items():
        assert own[key] == value, key


@contract
def test_init_lists_its_own_arguments(cls, kwargs, args):
    # As keras-hub's layers do: every argument with its default in the signature Python reads from the code
    # (no `__signature__` rewritten), and one base class of ours at most between the layer and Keras' Layer.
    assert "__signature__" not in vars(cls.__init__)
    assert set(init_parameters(cls)) >= set(kwargs)
    ours = [base for base in cls.__mro__[1:] if base.__module__.startswith("tf_transformer")]
    assert len(ours) <= 1, ours
    assert cls.__mro__[1 + len(ours)] is keras.layers.Layer


@contract
def test_config_round_trip(cls, kwargs, args):
    layer = cls(**kwargs)
    config = layer.get_config()
    assert cls.from_config(config).get_config() == config
    layer(*args)  # building does not change the config
    assert cls.from_config(layer.get_config()).get_config() == config


@contract
def test_copied_weights_give_identical_outputs(cls, kwargs, args):
    layer = cls(**kwargs)
    expected = convert_to_numpy(layer(*args))
    clone = cls.from_config(layer.get_config())
    before = convert_to_numpy(clone(*args))
    if layer.weights:
        assert not np.allclose(before, expected)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(convert_to_numpy(clone(*args)), expected)
    assert [w.path.split("/", 1)[-1] for w in clone.weights] == [w.path.split("/", 1)[-1] for w in layer.weights]


@contract
def test_registered_serialization(cls, kwargs, args):
    layer = cls(**kwargs)
    serialized = keras.saving.serialize_keras_object(layer)
    assert serialized["registered_name"] == f"tf_transformer>{cls.__name__}"
    restored = keras.saving.deserialize_keras_object(serialized)  # no custom_objects
    assert type(restored) is cls
    assert restored.get_config() == layer.get_config()


@contract
def test_docstring_sections(cls, kwargs, args):
    docstring = inspect.getdoc(cls)
    for section in ("Args:", "Call arguments:", "Returns:", "Example:", "Reference"):
        assert section in docstring, f"{cls.__name__} docstring lacks {section!r}"


@contract
def test_docstring_example_runs(cls, kwargs, args):
    module = inspect.getmodule(cls)
    tests = doctest.DocTestFinder(recurse=False).find(cls, cls.__name__, module=module, globs=vars(module))
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    failed, attempted = runner.summarize(verbose=False)
    assert attempted > 0, f"{cls.__name__} has no doctest example"
    assert failed == 0


AUTO_NAME = re.compile(r"_\d+$")
STACK_NAME = re.compile(r"^layer_\d+$")


@contract
def test_sublayers_have_explicit_names(cls, kwargs, args):
    first, second = cls(**kwargs), cls(**kwargs)
    first(*args)
    second(*args)
    names = [sublayer.name for sublayer in first._flatten_layers(include_self=False)]
    for name in names:
        assert STACK_NAME.match(name) or not AUTO_NAME.search(name), f"auto-generated sublayer name {name!r}"
    # An automatic name ("dense", "dense_1", ...) would differ between two instances.
    assert names == [sublayer.name for sublayer in second._flatten_layers(include_self=False)]


@contract
def test_per_layer_dtype_policy_reaches_sublayers(cls, kwargs, args):
    layer = cls(**kwargs, dtype="mixed_float16")
    output = layer(*args)
    assert keras.backend.standardize_dtype(output.dtype) == "float16"
    assert all(weight.dtype == "float32" for weight in layer.weights)
    for sublayer in layer._flatten_layers(include_self=False):
        assert sublayer.dtype_policy.name == "mixed_float16", sublayer.name


def layer_modules():
    folder = pathlib.Path(layers_package.__file__).parent
    return sorted(
        path.stem
        for path in folder.glob("*.py")
        if path.stem not in ("__init__", "masking") and not path.stem.startswith("_")
    )


@pytest.mark.parametrize("module_name", layer_modules())
def test_module_defines_one_public_layer(module_name):
    module = importlib.import_module(f"tf_transformer.layers.{module_name}")
    classes = [
        obj
        for name, obj in vars(module).items()
        if inspect.isclass(obj) and obj.__module__ == module.__name__ and not name.startswith("_")
    ]
    assert len(classes) == 1, [c.__name__ for c in classes]
    assert issubclass(classes[0], keras.layers.Layer)
    assert classes[0].__name__ in layers_package.__all__
