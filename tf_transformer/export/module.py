"""`TranslationModule`: a trained Transformer and its tokenizer as a `tf.Module` with serving signatures.

Everything from raw text to raw text is in the graph: tensorflow-text's tokenizer and detokenizer, the
encoder, and beam search (one `tf.while_loop` over the cached decoder). Only TensorFlow core and
tensorflow-text ops are used, no `py_function`, so stock TensorFlow Serving runs the saved module.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from tf_transformer.data.source_ids import source_token_limit, truncate_source_ragged
from tf_transformer.decoding import translate
from tf_transformer.decoding.settings import PAPER, DecodingSettings, require_settings
from tf_transformer.errors import require_tensorflow_backend

# Undecodable input bytes and byte-fallback pieces that do not form UTF-8 become U+FFFD, as Python's
# bytes.decode("utf-8", errors="replace") does it (each maximal invalid subsequence gives one U+FFFD).
_REPLACEMENT_CHAR = 0xFFFD


def _valid_utf8(strings):
    return tf.strings.unicode_transcode(strings, "UTF-8", "UTF-8", errors="replace", replacement_char=_REPLACEMENT_CHAR)


class TranslationModule(tf.Module):
    """A `Transformer` and its `Tokenizer` with the serving signatures; save it with `tf.saved_model.save`.

    Signatures (the functions are traced when the module is saved, with autograph off: the decoders are
    explicit `tf.while_loop`s, and autograph would only make tracing slower):

    - `serving_default(inputs: tf.string [batch]) -> {"outputs": tf.string [batch], "scores": float32 [batch]}`:
      the best translation of each sentence and its length-penalised log-probability.
    - `translate_nbest(inputs: tf.string [batch]) -> {"outputs": tf.string [batch, n_best],
      "scores": float32 [batch, n_best]}`: the `n_best` best, best first (beam search run with `n_best`).
    - `translate_with_prefix(inputs: tf.string [batch], target_prefixes: tf.string [batch]) -> {"outputs":
      tf.string [batch], "scores": float32 [batch]}`: as `serving_default`, each translation starting with its
      prefix ("" for none; forced tokens, counted in the score; cut to `max_length - 1` tokens). A second
      signature rather than an optional input, as TensorFlow Serving's signatures have no optional inputs.
    - `translate_ids(source_ids: int32 [batch, source_len]) -> {"output_ids": int32 [batch, T],
      "scores": float32 [batch]}`: for callers who tokenize outside the graph. A row's source is its ids
      before the first 0 (padding) or EOS; the EOS is added here. Output ids are the best hypothesis
      without BOS, ending with EOS, 0 after it; a row without ids gives all zeros and score 0.0.
    - `token_counts(inputs: tf.string [batch]) -> int32 [batch]` (a function, not a signature): the
      tokens of each sentence before truncation, for clients that batch by tokens.

    Input behaviour, the same for every text signature and the same as `tf_transformer.decoding.text`:

    - A sentence is tokenized without BOS/EOS, cut to its first `config.max_length - 1` tokens if longer,
      and given an EOS: the source ids that training uses. Longer input never fails.
    - A sentence without tokens (empty or blank) is not decoded: its translations are "" with score 0.0.
    - The sentences with tokens are sorted longest first (input order among equal lengths), padded to the
      longest and decoded as one batch; outputs come back in input order. So a batch gives exactly what
      `TextTranslator` gives when it decodes the same sentences in one batch.
    - Input bytes that are not UTF-8 are replaced: each maximal invalid subsequence becomes U+FFFD, as
      Python's `bytes.decode("utf-8", errors="replace")`. Outputs are always valid UTF-8 (a byte-fallback
      piece sequence that is not UTF-8 is replaced the same way).
    - An empty batch (shape [0]) gives empty outputs.

    Args:
        model: a built `Transformer` with trained weights.
        tokenizer: its `tf_transformer.data.Tokenizer`.
        settings: a `DecodingSettings`, fixed in the graph (default `PAPER`); `translate_nbest` returns its
            `n_best` hypotheses (n_best=beam_size: the whole beam), the other signatures the best.

    Raises:
        ValueError: a tokenizer of another vocabulary size than the model's. TypeError: `settings` is not a
            `DecodingSettings`.

    Example:

        model, tokenizer, _ = tf_transformer.checkpoints.load_translation_model("runs/multi30k_tiny")
        module = TranslationModule(model, tokenizer, DecodingSettings(beam_size=4, n_best=4))
        tf.saved_model.save(module, "exports/multi30k/1", signatures=module.signatures())
    """

    def __init__(self, model, tokenizer, settings: DecodingSettings = PAPER):
        require_tensorflow_backend("The export (TranslationModule)")
        super().__init__(name="translation")
        require_settings(settings)
        if tokenizer.vocab_size != model.config.vocab_size:
            raise ValueError(
                f"tokenizer: {tokenizer.vocab_size} tokens, but the model's vocab_size is {model.config.vocab_size}. "
                "Fix: use the vocab/ and config.json of one training run."
            )
        self.model = model
        self.tokenizer = tokenizer
        self.n_best = settings.n_best
        self.max_source_tokens = source_token_limit(model.config.max_length)  # as in training
        cap = settings.length_cap
        # What export_config.json records (its keys predate DecodingSettings; clients read them).
        self.settings = dict(
            beam_size=settings.beam_size,
            length_penalty=settings.length_penalty,
            n_best=self.n_best,
            max_decode_length=cap.max_decode_length,
            extra_decode_length=cap.extra,
            max_decode_length_ratio=cap.ratio,
            no_repeat_ngram_size=settings.no_repeat_ngram_size,
            min_decode_length=settings.min_decode_length,
        )
        spec = tf.TensorSpec([None, None], tf.int32)

        def decoder(n_best, with_prefix=False):
            chosen = dataclasses.replace(settings, n_best=n_best)

            def decode(source_ids, target_prefix_ids=None):
                result = translate(model, source_ids, chosen, target_prefix_ids=target_prefix_ids)
                return result.ids, result.scores

            return tf.function(decode, input_signature=[spec, spec] if with_prefix else [spec], autograph=False)

        # serving_default runs its own 1-best search: it may stop earlier than an n-best one.
        self._decode_best = decoder(1)
        self._decode_n_best = self._decode_best if self.n_best == 1 else decoder(self.n_best)
        self._decode_best_with_prefix = decoder(1, with_prefix=True)

    def signatures(self) -> dict:
        """The signature name -> function mapping for `tf.saved_model.save(..., signatures=...)`."""
        return {
            "serving_default": self.serving_default,
            "translate_nbest": self.translate_nbest,
            "translate_with_prefix": self.translate_with_prefix,
            "translate_ids": self.translate_ids,
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")], autograph=False)
    def serving_default(self, inputs):
        texts, scores = self._translate_texts(inputs, self._decode_best, 1)
        return {"outputs": texts[:, 0], "scores": scores[:, 0]}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")], autograph=False)
    def translate_nbest(self, inputs):
        texts, scores = self._translate_texts(inputs, self._decode_n_best, self.n_best)
        return {"outputs": texts, "scores": scores}

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.string, name="inputs"),
            tf.TensorSpec([None], tf.string, name="target_prefixes"),
        ],
        autograph=False,
    )
    def translate_with_prefix(self, inputs, target_prefixes):
        texts, scores = self._translate_texts(inputs, self._decode_best_with_prefix, 1, target_prefixes)
        return {"outputs": texts[:, 0], "scores": scores[:, 0]}

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="source_ids")], autograph=False)
    def translate_ids(self, source_ids):
        vocab_size = self.model.config.vocab_size
        checks = [
            tf.debugging.assert_non_negative(source_ids, message="source_ids: ids must be >= 0 (0 is padding)"),
            tf.debugging.assert_less(
                source_ids, vocab_size, message=f"source_ids: ids must be < vocab_size={vocab_size}"
            ),
        ]
        with tf.control_dependencies(checks):
            ends = tf.equal(source_ids, self.model.config.pad_id) | tf.equal(source_ids, self.model.config.eos_id)
        before_end = tf.equal(tf.cumsum(tf.cast(ends, tf.int32), axis=1), 0)
        ids, scores, rows = self._translate_tokens(tf.ragged.boolean_mask(source_ids, before_end), self._decode_best, 1)
        ids = tf.concat([ids[:, 0], tf.zeros([1, tf.shape(ids)[-1]], tf.int32)], axis=0)
        scores = tf.concat([scores[:, 0], [0.0]], axis=0)
        return {"output_ids": tf.gather(ids, rows), "scores": tf.gather(scores, rows)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")], autograph=False)
    def token_counts(self, inputs):
        return tf.cast(self.tokenizer.tokenize(_valid_utf8(inputs)).row_lengths(), tf.int32)

    # --------------------------------------------------------------------------------------------- helpers

    def _translate_texts(self, inputs, decode, n_best, target_prefixes=None):
        """Strings [batch] (and prefix strings [batch], for a `decode` that takes prefix ids) -> texts tf.string
        [batch, n_best], scores float32 [batch, n_best]."""
        prefix_tokens = None
        if target_prefixes is not None:
            checks = [tf.debugging.assert_equal(tf.shape(target_prefixes), tf.shape(inputs),
                                                message="target_prefixes: one prefix per input sentence")]  # fmt: skip
            with tf.control_dependencies(checks):
                prefix_tokens = self.tokenizer.tokenize(_valid_utf8(target_prefixes))
            prefix_tokens = tf.cast(prefix_tokens[:, : self.max_source_tokens], tf.int32)  # room for the EOS
        tokens = self.tokenizer.tokenize(_valid_utf8(inputs))
        ids, scores, rows = self._translate_tokens(tokens, decode, n_best, prefix_tokens)
        texts = self.tokenizer.detokenize(tf.reshape(ids, [-1, tf.shape(ids)[-1]]))
        texts = tf.reshape(_valid_utf8(texts), [-1, n_best])
        # One extra row, "" and 0.0, for the sentences that were not decoded.
        texts = tf.concat([texts, tf.fill([1, n_best], "")], axis=0)
        scores = tf.concat([scores, tf.zeros([1, n_best])], axis=0)
        return tf.gather(texts, rows), tf.gather(scores, rows)

    def _translate_tokens(self, tokens, decode, n_best, prefix_tokens=None):
        """Decodes the rows of ragged int32 tokens [batch, (tokens)] that have tokens, longest first (with
        ragged int32 `prefix_tokens` [batch, (prefix)], the prefix of each row, for a `decode` that takes them).

        Returns:
            ids int32 [decoded, n_best, T] and scores float32 [decoded, n_best] of the decoded rows, in
            decoding order; rows int32 [batch]: each input row's index in them, or `decoded` (one past the
            end) for a row without tokens.
        """
        config = self.model.config
        sources = truncate_source_ragged(tokens, config.max_length, config.eos_id)  # the rows + EOS
        lengths = sources.row_lengths()
        has_tokens = lengths > 1  # more than the EOS
        # Longest first, input order among equals: the order TextTranslator batches them in.
        order = tf.argsort(-tf.boolean_mask(lengths, has_tokens), stable=True)
        source_ids = tf.gather(tf.ragged.boolean_mask(sources, has_tokens), order).to_tensor()
        decoded = tf.shape(order)[0]
        inputs = (source_ids,)
        if prefix_tokens is not None:
            inputs += (tf.gather(tf.ragged.boolean_mask(prefix_tokens, has_tokens), order).to_tensor(),)
        ids, scores = tf.cond(
            decoded > 0,
            lambda: decode(*inputs),
            lambda: (tf.zeros([0, n_best, 0], tf.int32), tf.zeros([0, n_best], tf.float32)),
        )
        rank = tf.cumsum(tf.cast(has_tokens, tf.int32)) - 1  # each row's index among the rows with tokens
        position = tf.concat([tf.math.invert_permutation(order), [decoded]], axis=0)
        rows = tf.gather(position, tf.where(has_tokens, rank, decoded))
        return ids, scores, rows
