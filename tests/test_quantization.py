"""int8 weights (`tf_transformer.quantization`) against a NumPy reference of the quantization.

One tiny model per embedding layout (tied, and untied with its own output projection), random weights:
what is under test is the arithmetic of the int8 scheme and where the decoders read the kernels, not quality
(BLEU of a trained model: benchmarks/NOTES.md entry 24).
"""

import numpy as np
import pytest
import tensorflow as tf

import tf_transformer as tft
from tf_transformer import quantization
from tf_transformer.decoding import DecodingSettings, translate
from tf_transformer.decoding.scoring import score_ids
from tf_transformer.layers import _quantized

SOURCE = np.array([[5, 6, 7, 8, 9, 2], [10, 11, 12, 2, 0, 0]], np.int32)
TARGET_IN = np.array([[1, 13, 14, 15], [1, 16, 17, 0]], np.int32)
EPSILON = 1e-7  # keras.backend.epsilon(), which abs_max_quantize adds to max |w|


def make_model(tied, seed=3):
    tf.keras.utils.set_random_seed(seed)
    config = tft.TransformerConfig.from_preset("tiny").replace(
        vocab_size=60, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=2,
        max_length=40, dropout=0.0, tie_output_projection=tied,
    )  # fmt: skip
    model = tft.Transformer(config)
    model.build()
    return model


def reference(weight, axis):
    """NumPy int8 of Keras' abs-max scheme: scale = 127 / (max |w| + eps) along `axis`, values = round(w * scale)."""
    scale = np.float32(127.0) / (np.max(np.abs(weight), axis=axis, keepdims=True) + np.float32(EPSILON))
    values = np.clip(np.round(weight * scale), -127, 127).astype(np.int8)
    return values, scale


def key(variable):
    """A variable's path inside its model (the model's own name differs between models)."""
    return variable.path.split("/", 1)[1]


def expected_axis(path):
    """The axis the scales reduce: per token for the embeddings (axis 1), per output channel for kernels."""
    return 1 if path.endswith("embeddings") else 0


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def models(request):
    """(float model, int8 model with the same weights, {path: float weights before quantizing})."""
    float_model, int8_model = make_model(request.param), make_model(request.param)
    before = {key(variable): variable.numpy() for variable in int8_model.weights}
    quantization.quantize_model(int8_model, "int8")
    return float_model, int8_model, before


def test_the_commands_and_the_layers_know_the_same_modes():
    assert quantization.MODES == _quantized.MODES == ("none", "int8")


def test_every_matrix_is_int8_with_numpy_values_and_scales(models):
    _, model, before = models
    weights = {key(variable): variable for variable in model.weights}
    int8 = sorted(path for path, variable in weights.items() if variable.dtype == "int8")
    matrices = sorted(path for path, value in before.items() if value.ndim == 2 and "position" not in path)
    assert int8 == matrices  # attention, feed-forward, embeddings and any untied projection; no float copy left
    assert model.quantized_weights == "int8"
    for path in int8:
        axis = expected_axis(path)
        values, scale = reference(before[path], axis)
        scale_path = path + "_scale" if not path.endswith("/kernel") else path[: -len("kernel")] + "kernel_scale"
        np.testing.assert_allclose(weights[scale_path].numpy(), np.squeeze(scale, axis), rtol=1e-6)
        got = weights[path].numpy()
        # Rounding ties may fall either way between float32 orders of operations: at most one step, rarely.
        assert np.abs(got.astype(np.int32) - values).max() <= 1
        assert np.mean(got == values) > 0.999
        # The round trip: each weight within half a step of its channel (max |w| / 254) of the float weight.
        restored = got.astype(np.float32) / weights[scale_path].numpy()[(...,) if axis == 0 else (..., None)]
        half_step = 0.5 / scale + 1e-7
        assert np.all(np.abs(restored - before[path]) <= half_step * (1 + 1e-5)), path


def test_the_int8_model_is_the_float_model_with_rounded_weights(models):
    """The int8 model's logits equal those of a float model whose matrices are the NumPy-dequantized values."""
    float_model, model, before = models
    rounded = make_model(model.config.tie_output_projection)
    int8_paths = {key(variable) for variable in model.weights if variable.dtype == "int8"}
    for variable in rounded.weights:
        value = before[key(variable)]
        if key(variable) in int8_paths:
            values, scale = reference(value, expected_axis(key(variable)))
            value = values.astype(np.float32) / scale
        variable.assign(value)
    expected = rounded((SOURCE, TARGET_IN), training=False).numpy()
    got = model((SOURCE, TARGET_IN), training=False).numpy()
    np.testing.assert_allclose(got, expected, atol=2e-5)


def test_int8_logits_stay_within_the_rounding_noise_of_float32(models):
    """Bound: rounding moves each weight by at most half a step of its channel, about uniformly. So the int8
    logits must move no more than 2x as far as those of the float model with every weight moved by uniform noise
    of that half step (seeded: a fixed draw), and no argmax of a confident position may change."""
    float_model, model, before = models
    float_logits = float_model((SOURCE, TARGET_IN), training=False).numpy()
    int8_logits = model((SOURCE, TARGET_IN), training=False).numpy()
    noisy = make_model(model.config.tie_output_projection)
    rng = np.random.default_rng(0)
    int8_paths = {key(variable) for variable in model.weights if variable.dtype == "int8"}
    for variable in noisy.weights:
        value = before[key(variable)]
        if key(variable) in int8_paths:
            _, scale = reference(value, expected_axis(key(variable)))
            value = value + rng.uniform(-0.5, 0.5, value.shape).astype(np.float32) / scale
        variable.assign(value)
    noise = np.abs(noisy((SOURCE, TARGET_IN), training=False).numpy() - float_logits).max()
    error = np.abs(int8_logits - float_logits).max()
    assert 0 < error <= 2 * noise, (error, noise)
    ranked = np.sort(float_logits, axis=-1)
    confident = (ranked[..., -1] - ranked[..., -2]) > 2 * error
    assert np.array_equal(np.argmax(int8_logits, -1)[confident], np.argmax(float_logits, -1)[confident])


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_decoders_dequantize_once_and_score_as_the_model(models, method):
    """The decoders take the decoder's kernels dequantized before their loop; their scores are still the
    teacher-forced log-probabilities of the int8 model (`score_ids`, which dequantizes where it reads)."""
    _, model, _ = models
    settings = dict(method=method, max_decode_length=9)
    if method == "beam":
        settings.update(beam_size=3, length_penalty=0.0)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def decode(source_ids):
        result = translate(model, source_ids, DecodingSettings(**settings))
        return result.ids, result.scores

    ids, scores = decode(tf.constant(SOURCE))
    scored = score_ids(model, SOURCE, ids[:, 0])
    np.testing.assert_allclose(scores[:, 0].numpy(), scored.log_probs.numpy(), rtol=1e-5, atol=1e-5)

    # Inside the loop the only int8 casts left are the looked-up embedding rows (one a step).
    graph = decode.get_concrete_function().graph.as_graph_def()
    loop_bodies = [function for function in graph.library.function if "body" in function.signature.name]
    assert loop_bodies
    for function in loop_bodies:
        int8_casts = [node for node in function.node_def if node.op == "Cast" and node.attr["SrcT"].type == tf.int8]
        assert len(int8_casts) <= 1, [node.name for node in int8_casts]


def test_bad_modes_and_second_quantization_are_refused(models):
    _, model, _ = models
    with pytest.raises(ValueError, match=r"quantize: expected one of none, int8, got 'int4'\. Fix:"):
        quantization.quantize_model(make_model(True), "int4")
    with pytest.raises(ValueError, match="already quantized"):
        quantization.quantize_model(model, "int8")
    untouched = make_model(True)
    assert quantization.quantize_model(untouched, "none") is untouched
    assert untouched.quantized_weights == "none"
    assert not any(variable.dtype == "int8" for variable in untouched.weights)
