"""The shared plumbing of the encoder/decoder layers and stacks: the options each lists in its own signature agree
with `SublayerOptions` (names and defaults, which the models read from a config), and a FeedForward that calls its
Dense sublayers (so Keras features applied to them take effect)."""

import dataclasses
import inspect

import numpy as np
import pytest
from keras.ops import convert_to_numpy

from tf_transformer.config import TransformerConfig
from tf_transformer.layers import Decoder, DecoderLayer, Encoder, EncoderLayer, FeedForward
from tf_transformer.layers._options import SublayerOptions


@pytest.mark.parametrize("cls", [EncoderLayer, DecoderLayer, Encoder, Decoder], ids=lambda cls: cls.__name__)
def test_signature_lists_the_options_with_their_defaults(cls):
    parameters = inspect.signature(cls.__init__).parameters
    for field in dataclasses.fields(SublayerOptions):
        assert parameters[field.name].default == field.default, field.name
        assert parameters[field.name].kind is inspect.Parameter.KEYWORD_ONLY
    layer = cls(**({"num_layers": 1} if "num_layers" in parameters else {}), d_model=8, num_heads=2, d_ff=16)
    assert SublayerOptions.of(layer) == SublayerOptions()


def test_the_options_are_config_fields():
    config_fields = {field.name for field in dataclasses.fields(TransformerConfig)}
    assert {field.name for field in dataclasses.fields(SublayerOptions)} <= config_fields


def test_feed_forward_applies_quantized_sublayers():
    layer = FeedForward(d_model=8, d_ff=16)
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype(np.float32)
    expected = convert_to_numpy(layer(x))
    layer.inner.quantize("int8")
    layer.outer.quantize("int8")
    quantized = convert_to_numpy(layer(x))
    assert quantized.shape == expected.shape
    assert not np.array_equal(quantized, expected)  # the int8 path ran
    np.testing.assert_allclose(quantized, expected, atol=0.05)


def test_config_options_reach_every_feed_forward_and_attention():
    from tf_transformer.models.transformer import Transformer

    config = dataclasses.replace(
        TransformerConfig.from_preset("tiny"), attention_dropout=0.15, activation_dropout=0.25, activation="gelu"
    )
    model = Transformer(config)
    layers = [*model.encoder.layers, *model.decoder.layers]
    assert len(layers) == config.num_encoder_layers + config.num_decoder_layers
    for layer in layers:
        assert (layer.feed_forward.activation_dropout, layer.feed_forward.activation) == (0.25, "gelu")
        assert layer.self_attention.attention_dropout == 0.15
