"""The encoder-decoder Transformer as a `keras.Model`."""

from __future__ import annotations

import keras
from keras import ops

from tf_transformer import _keras_internals
from tf_transformer.config import ConfigError, TransformerConfig
from tf_transformer.layers import Decoder, DecoderLayer, Encoder, EncoderLayer, TokenEmbedding, _quantized, masking
from tf_transformer.layers._building import build_for_fit, build_sublayer
from tf_transformer.layers._ops import dense
from tf_transformer.layers._options import SublayerOptions
from tf_transformer.models.embedder import embed, make_position_layer


@keras.saving.register_keras_serializable(package="tf_transformer")
class Transformer(keras.Model):
    """The Transformer of "Attention Is All You Need", built from a `TransformerConfig`.

    Args:
        config: a `TransformerConfig` (or its dict form, as `get_config` writes it).

    Call arguments:
        inputs: a pair `(source_ids, target_input_ids)`, int `[batch, source_len]` and
            `[batch, target_len]`; id 0 is padding everywhere. `target_input_ids` starts with `bos_id`.
        training: whether dropout is active.

    Returns:
        float32 logits `[batch, target_len, output_vocab_size]`, also under mixed precision.

    Mask behaviour: source padding is hidden from encoder self-attention and from encoder-decoder
    attention; the decoder sees only earlier target positions (look-ahead mask) that are not padding.
    Extra padding changes no logit of a real position.

    Decoding building blocks: `encode(source_ids)` -> `(memory, memory_mask)`; `init_cache(memory,
    max_length)`; `decode(target_ids, memory, memory_mask, cache=..., decode_index=i)` -> logits of the
    new positions and the updated cache, equal to what the full `call` gives at those positions;
    `decoding_constants()`, extra `decode` arguments that a decoding loop computes once. Together they are
    the contract the decoders rely on, `tf_transformer.decoding.DecodableModel`.
    `attention_weights(source_ids, target_ids)` returns every layer's attention weights, for plots.

    Example:

    >>> import numpy as np
    >>> import tf_transformer as tft
    >>> config = tft.TransformerConfig.from_preset("tiny")
    >>> model = tft.Transformer(config)
    >>> logits = model((np.array([[5, 6, 7, 2]]), np.array([[1, 8, 9]])))
    >>> logits.shape == (1, 3, config.output_vocab_size)
    True

    Training data is `((source_ids, target_input_ids), target_output_ids)`:

        model.compile(optimizer=tft.make_optimizer(config.d_model, warmup_steps=4000),
                      loss=tft.MaskedCrossEntropy(label_smoothing=0.1), metrics=[tft.MaskedAccuracy()])
        model.fit(dataset)

    Reference: Vaswani et al., 2017, https://arxiv.org/abs/1706.03762
    """

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = TransformerConfig.from_dict(config)
        if config.num_decoder_layers < 1:
            raise ConfigError(
                "num_decoder_layers: a Transformer needs at least one decoder layer. Fix: set "
                "num_decoder_layers >= 1 (or use SequenceClassifier for an encoder only)."
            )
        self.config = config
        self._quantized_weights = "none"
        self.source_embedding = TokenEmbedding(
            config.vocab_size,
            config.d_model,
            name="shared_embedding" if config.share_embeddings else "source_embedding",
            dtype=self.dtype_policy,
        )
        self.target_embedding = (
            None
            if config.share_embeddings
            else TokenEmbedding(
                config.output_vocab_size, config.d_model, name="target_embedding", dtype=self.dtype_policy
            )
        )
        self.source_position = make_position_layer(config, "source_position", self.dtype_policy)
        self.target_position = make_position_layer(config, "target_position", self.dtype_policy)
        self.embedding_dropout = keras.layers.Dropout(config.dropout, name="embedding_dropout", dtype=self.dtype_policy)
        sizes = (config.d_model, config.num_heads, config.d_ff)
        options = SublayerOptions.of(config).as_kwargs()
        self.encoder = Encoder(config.num_encoder_layers, *sizes, name="encoder", dtype=self.dtype_policy, **options)
        self.decoder = Decoder(config.num_decoder_layers, *sizes, name="decoder", dtype=self.dtype_policy, **options)
        self.output_projection = (
            None
            if config.tie_output_projection
            else keras.layers.Dense(
                config.output_vocab_size, use_bias=False, name="output_projection", dtype=self.dtype_policy
            )
        )

    def set_dropout(self, rate: float, rebuild_train_function: bool = False) -> None:
        """Sets P_drop, the config's `dropout` (the embeddings and every sublayer output): the one way to change a
        built model's dropout (the time budget does, during `fit`).

        Args:
            rate: the new P_drop, in [0, 1).
            rebuild_train_function: also rebuild the traced training function, which otherwise keeps the rate it
                was traced with, so that a `fit` in progress trains its next step at `rate`. False: the rate counts
                from the next trace (e.g. the first `fit`).

        Raises:
            ConfigError: a positive rate for a model created with dropout 0 (its dropout layers have no random state).

        Example:
            `model.set_dropout(0.1, rebuild_train_function=True)` inside a callback of `model.fit`.
        """
        if rate > 0 and not hasattr(self.embedding_dropout, "seed_generator"):
            # Keras gives a Dropout layer its random state only when it is created with a positive rate.
            raise ConfigError(
                f"dropout: this model was built with dropout 0, so its dropout layers cannot be set to {rate}. "
                "Fix: build it with a positive dropout and set 0 after (the trainer builds with the highest rate "
                "of dropout_by_epochs)."
            )
        self.config = self.config.replace(dropout=rate)
        self.embedding_dropout.rate = rate
        for layer in _keras_internals.sublayers(self):
            if isinstance(layer, (Encoder, Decoder, EncoderLayer, DecoderLayer)):
                layer.dropout = rate
            if isinstance(layer, (EncoderLayer, DecoderLayer)):
                layer.dropout_layer.rate = rate  # the residual dropout (attention's and feed-forward's are others)
        if rebuild_train_function:
            self.make_train_function(force=True)

    def make_train_function(self, force=False):
        """Keras' training step, made after the weights and the optimizer's variables are built, so that `fit`
        traces it once, not twice."""
        build_for_fit(self)
        return super().make_train_function(force=force)

    @property
    def _target_embedding(self):
        return self.source_embedding if self.target_embedding is None else self.target_embedding

    def build(self, inputs_shape=None):
        vectors = (None, None, self.config.d_model)
        build_sublayer(self.source_embedding)
        build_sublayer(self.target_embedding)
        build_sublayer(self.source_position, vectors)
        build_sublayer(self.target_position, vectors)
        build_sublayer(self.encoder, vectors)
        build_sublayer(self.decoder, vectors, vectors)
        build_sublayer(self.output_projection, vectors)
        self.built = True

    def encode(self, source_ids, training=None, return_attention_scores=False):
        """Runs the encoder once: `(memory [batch, source_len, d_model], memory_mask [batch, 1, 1, src])`."""
        memory_mask = masking.padding_mask(source_ids, self.config.pad_id)
        x = embed(self.source_embedding, self.source_position, self.embedding_dropout, source_ids, training=training)
        outputs = self.encoder(
            x, attention_mask=memory_mask, training=training, return_attention_scores=return_attention_scores
        )
        if return_attention_scores:
            return outputs[0], memory_mask, outputs[1]
        return outputs, memory_mask

    def init_cache(self, memory, max_length):
        """One `{"self": ..., "cross": ...}` of `KeyValueCache`s per decoder layer for up to `max_length` target
        tokens (cross-attention keys computed here, once). `max_length=None`: growing self-attention caches, cheaper
        per step but not compilable by XLA."""
        if not self.built:
            self.build()  # the cache needs the attention weights, which a first call would otherwise create
        return self.decoder.init_cache(memory, max_length)

    def decode(
        self,
        target_ids,
        memory,
        memory_mask,
        training=None,
        cache=None,
        decode_index=None,
        return_attention_scores=False,
        output_kernel=None,
        dequantized_kernels=None,
    ):
        """float32 logits `[batch, target_len, vocab]` for `target_ids` given the encoder output. With `cache` and
        `decode_index`, `target_ids` are the tokens from position `decode_index` on and the updated cache follows the
        logits. `output_kernel` and `dequantized_kernels` (an int8 model's) come from `decoding_constants()`, computed
        once per decoding call (None: from the weights at each call)."""
        with _quantized.substitute(dequantized_kernels):
            return self._decode(
                target_ids, memory, memory_mask, training, cache, decode_index, return_attention_scores, output_kernel
            )

    def _decode(
        self, target_ids, memory, memory_mask, training, cache, decode_index, return_attention_scores, output_kernel
    ):
        incremental = cache is not None and decode_index is not None
        if incremental:
            self_mask = None  # the cache masks future positions itself
            start = decode_index
        else:
            length = ops.shape(target_ids)[1]
            self_mask = masking.combine_masks(
                masking.padding_mask(target_ids, self.config.pad_id), masking.look_ahead_mask(length)
            )
            start = 0
        x = embed(
            self._target_embedding,
            self.target_position,
            self.embedding_dropout,
            target_ids,
            start_index=start,
            training=training,
        )
        outputs = self.decoder(
            x,
            memory,
            self_attention_mask=self_mask,
            memory_mask=memory_mask,
            cache=cache,
            decode_index=decode_index,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        logits = self.project(outputs[0], output_kernel)
        return logits if len(outputs) == 1 else (logits,) + outputs[1:]

    def attention_weights(self, source_ids, target_ids, training=False):
        """Every attention weight of one teacher-forced pass, for inspection (taken before attention dropout).

        `source_ids` int `[batch, source_len]` and `target_ids` (the decoder inputs, from `bos_id`) int
        `[batch, target_len]`, 0 = padding. Returns lists of float32 tensors, one per layer, bottom first:
        "encoder_self" `[batch, heads, source_len, source_len]`, "decoder_self" `[batch, heads, target_len,
        target_len]` (0 above the diagonal), "decoder_cross" `[batch, heads, target_len, source_len]`. Each row is
        a softmax over the keys, 0 on padded keys (uniform when every key of the row is padding).
        """
        memory, memory_mask, encoder_self = self.encode(source_ids, training=training, return_attention_scores=True)
        _, decoder_scores = self.decode(
            target_ids, memory, memory_mask, training=training, return_attention_scores=True
        )
        return {
            "encoder_self": list(encoder_self),
            "decoder_self": [self_scores for self_scores, _ in decoder_scores],
            "decoder_cross": [cross_scores for _, cross_scores in decoder_scores],
        }

    def project(self, decoder_output, output_kernel=None):
        """Pre-softmax linear transformation, float32 `[batch, length, output_vocab_size]`; `output_kernel`, if
        given, is that transformation as a `[d_model, vocab]` matrix (`decoding_constants()`)."""
        if output_kernel is not None:
            logits = dense(decoder_output, ops.cast(output_kernel, decoder_output.dtype))
        elif self.output_projection is not None and _quantized.is_int8_dense(self.output_projection):
            logits = dense(decoder_output, _quantized.read_dense(self.output_projection, decoder_output.dtype))
        elif self.output_projection is None:
            logits = self._target_embedding.project(decoder_output)
        else:
            logits = self.output_projection(decoder_output)
        return ops.cast(logits, "float32")

    def decoding_constants(self):
        """Extra `decode` arguments that do not change from one decoding step to the next, computed once.

        Returns `{"output_kernel": [d_model, output_vocab_size]}`, the pre-softmax projection as a plain
        matrix in the compute dtype. With shared embeddings that is the embedding matrix transposed once per
        decoding call: at a decoding step's few hundred rows, a CPU multiplies by it faster than by the
        embedding matrix with `transpose_b`, and one copy per call is cheap (benchmarks/NOTES.md, entry 6).
        An int8 model (`quantize`) also gets `"dequantized_kernels"`: its decoder's kernels dequantized once
        per call rather than at every step (NOTES entry 24).
        """
        if not self.built:
            self.build()
        constants = {}
        if self.output_projection is None:
            kernel = ops.transpose(self._target_embedding.matrix("float32"))
        elif _quantized.is_int8_dense(self.output_projection):
            kernel = _quantized.read_dense(self.output_projection, "float32")
        else:
            kernel = self.output_projection.kernel
        constants["output_kernel"] = ops.cast(kernel, self.compute_dtype)
        if self.quantized_weights == _quantized.INT8:
            constants["dequantized_kernels"] = _quantized.dequantized_kernels(self.decoder)
        return constants

    @property
    def quantized_weights(self):
        """The weights' quantization: "int8" after `quantize("int8")`, else "none"."""
        return self._quantized_weights

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        """Weight-only int8 in place, for inference (`mode="int8"`; see `tf_transformer.quantization`).

        Every matrix becomes int8 with one float32 scale per output channel (per token for the embeddings),
        Keras' abs-max scheme: attention and feed-forward kernels, embeddings, the untied output projection.
        Biases, layer norms and learned positions stay float32, and so do the activations: the kernels are
        dequantized where they are read, and the decoders dequantize the decoder's once per call. Keras'
        `Model.quantize` would reach only the feed-forward `Dense` layers (the attention and embedding
        layers hold their own kernels), with int8 activations that TensorFlow multiplies slower on a CPU.
        """
        del config  # what Keras' wrapper of `quantize` makes of `mode`; the scheme here is fixed
        if filters is not None or kwargs:
            raise ValueError(
                "quantize: this model's int8 scheme is fixed (weight-only, per channel, every matrix). Fix: call "
                "quantize('int8') without filters or other arguments."
            )
        _quantized.check_mode(mode)
        if mode == "none":
            return
        if not self.built:
            self.build()
        with _quantized.one_garbage_collection():
            for layer in _keras_internals.sublayers(self):
                if isinstance(layer, keras.layers.Dense):
                    continue  # their FeedForward (or below) quantizes them
                if type(layer).quantize is not keras.layers.Layer.quantize:
                    layer.quantize(mode)
            if self.output_projection is not None:
                _quantized.quantize_dense(self.output_projection)
        self._quantized_weights = mode
        _keras_internals.mark_quantized(self)  # Keras' wrapper of `quantize` then refuses a second call
        self.train_function = self.test_function = self.predict_function = None

    def call(self, inputs, training=None):
        source_ids, target_ids = inputs
        memory, memory_mask = self.encode(source_ids, training=training)
        return self.decode(target_ids, memory, memory_mask, training=training)

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config):
        return cls(**config)
