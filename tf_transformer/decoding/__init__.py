"""Decoding a trained Transformer: greedy search, beam search (length penalty, n-best) and sampling.

Every decoder encodes the source once and runs a `tf.while_loop` over the model's incremental decoder
(`encode`, `init_cache`, `decode` and `config`: the `DecodableModel` protocol), with fixed-size output
buffers: one code path for eager calls, `tf.function` (also with
`input_signature=[tf.TensorSpec([None, None], tf.int32)]`), XLA (`tf.function(jit_compile=True)`) and
SavedModels. The self-attention caches grow by one position a step, except with the decoders'
`jit_compile=True`, which XLA needs: fixed buffers (TensorFlow cannot tell a decoder that XLA will compile
it, so the caller passes `jit_compile=True` to both). Wrap a decoder in a `tf.function` for speed.

Every decoder takes its settings as one `DecodingSettings` value (`tf_transformer.decoding.settings`, checked
when built; `PAPER`, the paper's, by default):

    translate(model, source_ids, DecodingSettings(beam_size=5, n_best=2, max_decode_length="1.5x+10"))

Output convention (all decoders):

- ids are int32, without BOS, include EOS, and are 0 (padding) after it. Padding is never emitted.
- Length: each sentence emits at most N tokens (EOS included) when `settings.max_decode_length` is N, or
  floor(A * its source length) + B for "Ax+B" (source length: its non-padding ids; the paper's "x+50");
  always at most `config.max_length`. A sentence that reaches its limit gets EOS as its last token, scored
  with the model's log-probability of EOS, so every output ends with EOS.
- The last axis T is N (capped at `config.max_length`), or `min(floor(A * source_ids.shape[1]) + B,
  config.max_length)`: the same in every mode (XLA needs a static size); columns that no sentence reached
  are 0. `trim_padding` drops them in eager code.
- Scores are float32: greedy and sampling give the sum of the model's log-probabilities of the emitted
  tokens; beam search gives that sum divided by the length penalty ((5 + length) / 6) ** alpha.

Scoring (`score_ids`, `score_texts`) is the reverse: the log-probability of a given target, teacher-forced,
the same sum the decoders report for their own outputs (see `tf_transformer.decoding.scoring`).

Word alignments (`align_ids`, `TextTranslator(..., with_alignments=True)`): from the cross-attention of one
teacher-forced pass over the output (see `tf_transformer.decoding.alignment`).
"""

from tf_transformer._lazy import lazy_attributes

# Imported on first use (PEP 562; see tf_transformer/_lazy.py): public name -> its module.
_LAZY = {
    "align_ids": "tf_transformer.decoding.alignment",
    "beam_search": "tf_transformer.decoding.beam_search",
    "DecodableModel": "tf_transformer.decoding.loop",
    "DecodeResult": "tf_transformer.decoding.translation",
    "greedy_decode": "tf_transformer.decoding.greedy",
    "PairScore": "tf_transformer.decoding.scoring",
    "METHODS": "tf_transformer.decoding.settings",
    "COMMAND_DEFAULTS": "tf_transformer.decoding.settings",
    "DecodingSettings": "tf_transformer.decoding.settings",
    "PAPER": "tf_transformer.decoding.settings",
    "sample_decode": "tf_transformer.decoding.sampling",
    "score_ids": "tf_transformer.decoding.scoring",
    "score_texts": "tf_transformer.decoding.scoring",
    "ScoreResult": "tf_transformer.decoding.scoring",
    "TextScorer": "tf_transformer.decoding.scoring",
    "TextTranslator": "tf_transformer.decoding.text",
    "translate": "tf_transformer.decoding.translation",
    "translate_texts": "tf_transformer.decoding.text",
    "trim_padding": "tf_transformer.decoding.translation",
    "XlaTextTranslator": "tf_transformer.decoding.xla_batches",
}
__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)

__all__ = [
    "COMMAND_DEFAULTS", "DecodableModel", "DecodeResult", "DecodingSettings", "METHODS", "PAPER", "PairScore",
    "ScoreResult", "TextScorer", "TextTranslator", "align_ids", "beam_search", "greedy_decode", "sample_decode",
    "score_ids", "score_texts", "translate", "translate_texts", "trim_padding", "XlaTextTranslator",
]  # fmt: skip
