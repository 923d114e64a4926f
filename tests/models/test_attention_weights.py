"""Transformer.attention_weights: softmax rows, masked keys, causal decoder, and a NumPy recomputation."""

import keras
import numpy as np
import pytest
from keras.ops import convert_to_numpy

import tf_transformer as tft

CONFIG = tft.TransformerConfig(
    vocab_size=40,
    d_model=16,
    d_ff=32,
    num_heads=2,
    num_encoder_layers=2,
    num_decoder_layers=2,
    max_length=20,
    dropout=0.0,
)
SOURCE = np.array([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]], np.int32)  # the second row has 2 padded keys
TARGET = np.array([[1, 11, 12, 13], [1, 14, 0, 0]], np.int32)


@pytest.fixture(scope="module")
def model_and_weights():
    keras.utils.set_random_seed(3)
    model = tft.Transformer(CONFIG)
    return model, model.attention_weights(SOURCE, TARGET)


def numpy_softmax(logits):
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def numpy_self_attention_weights(layer, x, may_attend):
    """softmax(Q K^T / sqrt(d_k)) per head from the layer's kernels; `may_attend` [batch, q, k]."""
    heads, d_k = layer.num_heads, layer.key_dim
    q = x @ convert_to_numpy(layer.query_kernel) + convert_to_numpy(layer.query_bias)
    # key_value_kernel is [W^K | W^V]: its first heads * d_k columns give the keys.
    k = (x @ convert_to_numpy(layer.key_value_kernel) + convert_to_numpy(layer.key_value_bias))[..., : heads * d_k]
    q = q.reshape(*x.shape[:2], heads, d_k).transpose(0, 2, 1, 3)
    k = k.reshape(*x.shape[:2], heads, d_k).transpose(0, 2, 1, 3)
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d_k)
    return numpy_softmax(np.where(may_attend[:, None], logits, -1e9))


def numpy_embed(model, ids):
    """Embedding * sqrt(d_model) + the paper's sinusoids, written out here."""
    d_model = CONFIG.d_model
    position = np.arange(ids.shape[1])[:, None]
    angles = position / 10000 ** (np.arange(0, d_model, 2) / d_model)
    table = np.zeros((ids.shape[1], d_model))
    table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
    return convert_to_numpy(model.source_embedding.embeddings)[ids] * np.sqrt(d_model) + table


def test_shapes_one_tensor_per_layer(model_and_weights):
    _, weights = model_and_weights
    assert sorted(weights) == ["decoder_cross", "decoder_self", "encoder_self"]
    expected = {"encoder_self": (2, 2, 5, 5), "decoder_self": (2, 2, 4, 4), "decoder_cross": (2, 2, 4, 5)}
    for name, shape in expected.items():
        assert len(weights[name]) == 2
        assert all(tuple(layer.shape) == shape for layer in weights[name])
        assert all(keras.backend.standardize_dtype(layer.dtype) == "float32" for layer in weights[name])


def test_rows_are_softmax_padded_keys_get_nothing_and_the_decoder_is_causal(model_and_weights):
    _, weights = model_and_weights
    for name, layers in weights.items():
        for layer in layers:
            layer = convert_to_numpy(layer)
            assert (layer >= 0).all()
            np.testing.assert_allclose(layer.sum(axis=-1), 1.0, rtol=1e-5)
            if name != "decoder_self":
                assert (layer[1, :, :, 3:] == 0).all()  # source padding
    for layer in weights["decoder_self"]:
        layer = convert_to_numpy(layer)
        above_diagonal = np.triu(np.ones((4, 4), bool), k=1)
        assert (layer[:, :, above_diagonal] == 0).all()
        assert (layer[1, :, :, 2:] == 0).all()  # target padding
        assert (layer[:, :, ~above_diagonal][..., :1] > 0).all()  # the first key is visible to every query


def test_first_layers_match_a_numpy_recomputation(model_and_weights):
    model, weights = model_and_weights
    source_keys = SOURCE != 0
    encoder_mask = np.broadcast_to(source_keys[:, None, :], (2, 5, 5))
    expected = numpy_self_attention_weights(
        model.encoder.layers[0].self_attention, numpy_embed(model, SOURCE), encoder_mask
    )
    np.testing.assert_allclose(convert_to_numpy(weights["encoder_self"][0]), expected, rtol=1e-4, atol=1e-6)

    causal = np.tril(np.ones((4, 4), bool))[None] & (TARGET != 0)[:, None, :]
    expected = numpy_self_attention_weights(model.decoder.layers[0].self_attention, numpy_embed(model, TARGET), causal)
    np.testing.assert_allclose(convert_to_numpy(weights["decoder_self"][0]), expected, rtol=1e-4, atol=1e-6)


def test_extra_padding_leaves_the_weights_of_real_tokens_unchanged(model_and_weights):
    model, weights = model_and_weights
    padded = model.attention_weights(np.pad(SOURCE, [(0, 0), (0, 3)]), np.pad(TARGET, [(0, 0), (0, 2)]))
    for layer, longer in zip(weights["encoder_self"], padded["encoder_self"], strict=True):
        np.testing.assert_allclose(convert_to_numpy(longer)[:, :, :5, :5], convert_to_numpy(layer), atol=1e-6)
        assert (convert_to_numpy(longer)[..., 5:] == 0).all()
    for layer, longer in zip(weights["decoder_cross"], padded["decoder_cross"], strict=True):
        np.testing.assert_allclose(convert_to_numpy(longer)[:, :, :4, :5], convert_to_numpy(layer), atol=1e-6)
