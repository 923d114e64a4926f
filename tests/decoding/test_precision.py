"""A model loaded under the mixed_bfloat16 policy (what the decoding commands' --mixed_precision=auto gives on a CPU
that computes bf16) really decodes in bf16: float32 weights, bf16 activations and matrix products, float32 logits
and scores; one loaded under float32 has no bf16 op at all. int8 weights refuse a bf16 model."""

import contextlib
import gzip

import keras
import numpy as np
import pytest
import tensorflow as tf

import tf_transformer as tft
from tf_transformer.checkpoints import load_translation_model, weights_checkpoint
from tf_transformer.data import train_sentencepiece
from tf_transformer.decoding import DecodingSettings, translate
from tf_transformer.decoding.scoring import score_texts
from tf_transformer.quantization import quantize_model

MATRIX_PRODUCTS = {"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum"}
SETTINGS = DecodingSettings(beam_size=3, n_best=2, max_decode_length=10)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, multi30k_dir):
    """A model directory with one checkpoint of random float32 weights (a 1-layer model: tracing is the cost)."""
    path = tmp_path_factory.mktemp("precision")
    lines = []
    for lang in ("en", "de"):
        with gzip.open(multi30k_dir / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
            lines += [next(handle).strip() for _ in range(100)]
    tokenizer = train_sentencepiece(lines, path / "vocab", vocab_size=400, seed=0)
    config = tft.TransformerConfig(
        vocab_size=tokenizer.vocab_size, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1,
        num_decoder_layers=1, max_length=32, dropout=0.0,
    )  # fmt: skip
    config.to_json(path / "config.json")
    keras.utils.set_random_seed(3)
    model = tft.Transformer(config)
    model.build()
    tf.train.CheckpointManager(weights_checkpoint(model), str(path / "checkpoints"), max_to_keep=1).save(1)
    return path


@contextlib.contextmanager
def dtype_policy(name):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def matrix_product_dtypes(function, *args):
    """The dtypes of the matrix products of `function`'s graph, the decoding loop's body functions included."""
    graph_def = function.get_concrete_function(*args).graph.as_graph_def()
    nodes = list(graph_def.node) + [node for function in graph_def.library.function for node in function.node_def]
    return {tf.dtypes.as_dtype(node.attr["T"].type).name for node in nodes if node.op in MATRIX_PRODUCTS}


@pytest.mark.parametrize("policy, compute_dtype", [("float32", "float32"), ("mixed_bfloat16", "bfloat16")])
def test_a_model_loaded_under_a_policy_decodes_in_its_compute_dtype(model_dir, policy, compute_dtype):
    with dtype_policy(policy):
        model, tokenizer, _ = load_translation_model(model_dir)
    assert keras.config.dtype_policy().name == "float32"  # the caller's policy is the caller's
    assert model.compute_dtype == compute_dtype
    assert {variable.dtype for variable in model.weights} == {"float32"}  # the checkpoint's weights, unrounded
    source_ids = tokenizer.tokenize(["A dog runs in the snow.", "Two men."]).to_tensor()
    memory, _ = model.encode(source_ids)
    assert memory.dtype == compute_dtype
    assert model.decoding_constants()["output_kernel"].dtype == compute_dtype  # the pre-softmax product
    decode = tf.function(lambda ids: translate(model, ids, SETTINGS))
    # Every matrix product of the beam search (attention, feed-forward, the output projection) is in the policy's
    # compute dtype: a bf16 decode has no float32 one, a float32 decode no bf16 one.
    assert matrix_product_dtypes(decode, tf.TensorSpec([None, None], tf.int32)) == {compute_dtype}
    result = decode(source_ids)
    assert result.scores.dtype == tf.float32  # log-softmax, top-k and scores in float32 either way
    assert np.all(np.isfinite(result.scores.numpy()))


def test_bf16_scores_are_the_float32_ones_to_bf16_precision(model_dir):
    # The same targets scored (teacher-forced) in both precisions: bf16's 8-bit mantissa, not another model.
    sources, targets = ["A dog runs in the snow.", "Two men talk."], ["Ein Hund läuft im Schnee.", "Zwei Männer."]
    scores = {}
    for policy in ("float32", "mixed_bfloat16"):
        with dtype_policy(policy):
            model, tokenizer, _ = load_translation_model(model_dir)
        scores[policy] = np.array([pair.log_prob for pair in score_texts(model, tokenizer, sources, targets)])
    assert not np.array_equal(scores["float32"], scores["mixed_bfloat16"])  # really computed otherwise
    np.testing.assert_allclose(scores["mixed_bfloat16"], scores["float32"], rtol=0.05)


def test_int8_weights_refuse_a_bf16_model(model_dir):
    with dtype_policy("mixed_bfloat16"):
        model, _, _ = load_translation_model(model_dir)
    with pytest.raises(ValueError, match=r"int8 weights compute in float32, but the model computes in bfloat16\. Fix"):
        quantize_model(model, "int8")
    quantize_model(model, "none")  # nothing to refuse
