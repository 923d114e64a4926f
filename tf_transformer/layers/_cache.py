"""The key/value caches of `MultiHeadAttention` for incremental decoding, typed by how they are used.

Not layers: this module holds no Keras layer (one public layer per module), and `tf_transformer.layers`
exports its classes.
"""

from __future__ import annotations

from keras import ops

from tf_transformer.layers import _tf_fast
from tf_transformer.layers._ops import gather

# The names of a growing self-attention cache's tensors (`empty_cache(..., max_length=None)`); a fixed buffer
# and a cross-attention cache use "key" and "value". The cache's type, not these names, says how it is used.
GROWING_CACHE_KEYS = ("past_key", "past_value")


class KeyValueCache(dict):
    """Keys and values `[batch, num_heads, length, d_k or d_v]` of one attention layer, for decoding.

    A dict of tensors (what TensorFlow's `nest` and `while_loop`, and Keras, pass through unchanged, keeping the
    type), whose subclass says how `MultiHeadAttention.call` uses it and how a decoder handles it: `tile` and
    `reorder` for beam search's hypotheses, `shape_invariants` for a TensorFlow while loop. Tensors only, no
    variables. Subclasses: `SelfAttentionBuffer`, `GrowingSelfAttentionCache`, `CrossAttentionCache`.
    """

    def tile(self, beam_size):
        """`[batch, ...]` -> `[batch * beam_size, ...]`, row b * beam_size + j for hypothesis j of sentence b."""
        return type(self)((name, ops.repeat(tensor, beam_size, axis=0)) for name, tensor in self.items())

    def reorder(self, rows):
        """The rows `rows` (int32 `[batch * beam_size]`): each hypothesis takes its parent's cache."""
        return type(self)((name, gather(tensor, rows, axis=0)) for name, tensor in self.items())

    def shape_invariants(self):
        """The shape invariants of this cache in a TensorFlow while loop: its tensors' shapes (TensorFlow only)."""
        return type(self)((name, _tf_fast.shape_invariant(tensor.shape)) for name, tensor in self.items())


class SelfAttentionBuffer(KeyValueCache):
    """A fixed self-attention buffer `{"key": [batch, num_heads, max_len, d_k], "value": [..., d_v]}`, written
    in place at each call's `decode_index`. Its shape never changes, which XLA needs."""


class GrowingSelfAttentionCache(KeyValueCache):
    """A growing self-attention cache `{"past_key": [batch, num_heads, decode_index, d_k], "past_value": [...,
    d_v]}` that each call extends by its new positions. Its length axis varies across a decoding loop."""

    def shape_invariants(self):
        return type(self)(
            (name, _tf_fast.shape_invariant(_relax_length(tensor.shape))) for name, tensor in self.items()
        )


class CrossAttentionCache(KeyValueCache):
    """The keys and values `{"key": [batch, num_heads, key_len, d_k], "value": [..., d_v]}` of a memory
    (`compute_key_value`), one row per sentence. Beam search's hypotheses of a sentence share its row (the
    layer takes `batch * k` queries against it), so `tile` and `reorder` leave it as it is."""

    def tile(self, beam_size):
        return self

    def reorder(self, rows):
        return self


def _relax_length(shape):
    shape = tuple(shape)
    return (*shape[:2], None, *shape[3:])
