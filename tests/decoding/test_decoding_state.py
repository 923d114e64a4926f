"""The typed decoding state: the model contract (a Protocol), the typed attention caches and beam search's
named loop state."""

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.decoding import DecodableModel, DecodingSettings, beam_search, constraints, loop
from tf_transformer.decoding.beam_search import BeamState
from tf_transformer.layers.attention import (
    CrossAttentionCache,
    GrowingSelfAttentionCache,
    MultiHeadAttention,
    SelfAttentionBuffer,
)


def test_the_transformer_and_a_stand_in_satisfy_the_model_contract(tiny_model, helpers):
    assert isinstance(tiny_model, DecodableModel)
    assert isinstance(helpers.TableModel(np.zeros([3, 5])), DecodableModel)
    assert not isinstance(object(), DecodableModel)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_init_cache_gives_typed_caches(one_layer_model, helpers, jit_compile):
    sources = tf.constant(helpers.make_sources([4, 2], seed=30))
    memory, _ = one_layer_model.encode(sources)
    plan = constraints.plan_lengths(one_layer_model.config, sources, DecodingSettings(max_decode_length="x+3"))
    (layer_cache,) = loop.init_decoding_cache(one_layer_model, memory, plan, jit_compile)
    assert type(layer_cache["self"]) is (SelfAttentionBuffer if jit_compile else GrowingSelfAttentionCache)
    assert type(layer_cache["cross"]) is CrossAttentionCache


def test_tile_reorder_and_shape_invariants_follow_the_cache_types(one_layer_model, helpers):
    sources = tf.constant(helpers.make_sources([4, 2], seed=31))
    memory, _ = one_layer_model.encode(sources)
    plan = constraints.plan_lengths(one_layer_model.config, sources, DecodingSettings(max_decode_length="x+3"))
    for jit_compile in (False, True):
        cache = loop.init_decoding_cache(one_layer_model, memory, plan, jit_compile)
        tiled = loop.tile_cache(cache, 3)
        assert tiled[0]["cross"] is cache[0]["cross"]  # one row per sentence, shared by its hypotheses
        assert type(tiled[0]["self"]) is type(cache[0]["self"])
        for name, tensor in tiled[0]["self"].items():
            assert tensor.shape[0] == 6
            np.testing.assert_array_equal(tensor.numpy(), np.repeat(cache[0]["self"][name].numpy(), 3, axis=0))
        rows = tf.constant([5, 4, 3, 2, 1, 0])
        reordered = loop.reorder_cache(tiled, rows)
        assert reordered[0]["cross"] is cache[0]["cross"]
        for name, tensor in reordered[0]["self"].items():
            np.testing.assert_array_equal(tensor.numpy(), tiled[0]["self"][name].numpy()[::-1])
        invariants = loop.shape_invariants(tiled)
        for name, shape in invariants[0]["self"].items():
            expected = tiled[0]["self"][name].shape
            assert shape.as_list() == (expected.as_list() if jit_compile else [6, expected[1], None, expected[3]])
        for name, shape in invariants[0]["cross"].items():
            assert shape == tiled[0]["cross"][name].shape


def test_other_cache_tensors_are_per_hypothesis_state():
    cache = [{"self": {"state": tf.constant([1, 2])}, "cross": {"memory": tf.constant([[1.0], [2.0]])}}]
    tiled = loop.tile_cache(cache, 2)
    np.testing.assert_array_equal(tiled[0]["self"]["state"].numpy(), [1, 1, 2, 2])
    np.testing.assert_array_equal(tiled[0]["cross"]["memory"].numpy(), [[1.0], [1.0], [2.0], [2.0]])
    reordered = loop.reorder_cache(tiled, tf.constant([3, 0, 1, 2]))
    np.testing.assert_array_equal(reordered[0]["self"]["state"].numpy(), [2, 1, 1, 2])


def test_the_beam_state_is_a_namedtuple_that_tf_nest_traverses():
    state = BeamState(*[tf.constant(index) for index in range(len(BeamState._fields))])
    assert BeamState._fields[-1] == "done" and len(tf.nest.flatten(state)) == len(BeamState._fields)
    assert type(tf.nest.map_structure(lambda t: t + 1, state)) is BeamState


def test_cache_types_survive_a_graph_loop():
    cache = GrowingSelfAttentionCache(past_key=tf.zeros([2, 1, 0, 3]), past_value=tf.zeros([2, 1, 0, 3]))

    @tf.function
    def grow(cache):
        def body(index, cache):
            new = GrowingSelfAttentionCache(
                (name, tf.concat([tensor, tf.ones([2, 1, 1, 3])], axis=2)) for name, tensor in cache.items()
            )
            assert type(cache) is GrowingSelfAttentionCache
            return index + 1, new

        initial = (tf.constant(0), cache)
        return tf.while_loop(
            lambda index, _: index < 4, body, initial, shape_invariants=loop.shape_invariants(initial)
        )[1]

    result = grow(cache)
    assert type(result) is GrowingSelfAttentionCache and result["past_key"].shape == (2, 1, 4, 3)


def _layer_and_inputs():
    layer = MultiHeadAttention(num_heads=2, d_model=8)
    x = np.random.default_rng(0).random((2, 3, 8)).astype("float32")
    layer(x)
    return layer, x


def test_attention_refuses_an_untyped_cache_naming_the_fix():
    layer, x = _layer_and_inputs()
    cache = dict(layer.empty_cache(2, None))  # the names alone no longer say the mode
    with pytest.raises(TypeError, match="expected a KeyValueCache.*Fix: make it with `empty_cache`"):
        layer(x[:, :1], cache=cache, decode_index=0)


def test_attention_checks_the_mode_against_decode_index():
    layer, x = _layer_and_inputs()
    with pytest.raises(ValueError, match="needs `decode_index`"):
        layer(x[:, :1], cache=layer.empty_cache(2, 3))
    with pytest.raises(ValueError, match="takes no `decode_index`"):
        layer(x[:, :1], cache=layer.compute_key_value(x), decode_index=0)


def test_the_beam_loop_reads_the_named_state(helpers):
    # A sentence stops once done (the state's last field): the same result with a batch-mate that runs on.
    logits = np.random.default_rng(4).normal(size=[6, 5, 7])
    model = helpers.TableModel(logits)
    ids, scores = beam_search(
        model, np.array([[5, 2], [6, 2]]), DecodingSettings(beam_size=3, n_best=2, max_decode_length=6)
    )
    alone_ids, alone_scores = beam_search(
        model, np.array([[5, 2]]), DecodingSettings(beam_size=3, n_best=2, max_decode_length=6)
    )
    np.testing.assert_array_equal(ids[:1], alone_ids)
    np.testing.assert_allclose(scores[:1], alone_scores)
