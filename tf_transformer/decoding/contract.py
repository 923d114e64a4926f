"""What the decoders need of a model: `DecodableModel`, written as a `typing.Protocol` (structural: a
`Transformer` satisfies it without naming it, and so does a test's stand-in)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


class DecodingConfig(Protocol):
    """The configuration fields the decoders read (`TransformerConfig` has them)."""

    bos_id: int
    eos_id: int
    pad_id: int
    max_length: int  # the most target positions; every output is capped at it
    output_vocab_size: int


@runtime_checkable
class DecodableModel(Protocol):
    """The incremental decoder that greedy search, beam search and sampling run.

    - `encode(source_ids, training=False)` -> `(memory, memory_mask)`: the encoder, run once per batch.
      `memory_mask` is what `decode` takes back; the decoders only pass it on.
    - `init_cache(memory, max_length)` -> the decoder's cache: any nest (dicts, lists, tuples) of tensors
      and `tf_transformer.layers.KeyValueCache`s (tf_transformer/layers/_cache.py). `max_length=None` asks
      for growing self-attention caches, an int (or int scalar tensor) for fixed buffers of that length (XLA). Each
      `KeyValueCache` says how beam search tiles and reorders it and how a `tf.while_loop` carries it; any
      other tensor is per-row state (beam search repeats it per hypothesis and reorders it by parent).
    - `decode(target_ids, memory, memory_mask, training=False, cache=cache, decode_index=step, **constants)`
      -> `(logits [rows, new_len, vocab], new_cache)`: the target tokens `[rows, new_len]` at positions
      `decode_index ...`, earlier positions read from `cache`; `new_cache` has the structure and types of
      `cache` (shapes too, except a growing cache's length). `memory` is None (the cache holds its keys). In
      beam search `rows` is `batch * beam_size` while `memory_mask` keeps `batch` rows.
    - `config`: a `DecodingConfig`.
    - Optional: `decoding_constants()` -> a dict of extra `decode` keyword arguments, computed once per
      decoding call (`Transformer.decoding_constants`).
    """

    config: DecodingConfig

    def encode(self, source_ids: Any, training: bool | None = None) -> tuple[Any, Any]: ...

    def init_cache(self, memory: Any, max_length: Any) -> Any: ...

    def decode(
        self,
        target_ids: Any,
        memory: Any,
        memory_mask: Any,
        training: bool | None = None,
        cache: Any = None,
        decode_index: Any = None,
    ) -> tuple[Any, Any]: ...
