"""XLA decoding of text batches with few compilations: each batch is padded to a bucketed shape first.

XLA compiles one program per input shape (seconds each on a CPU), and the batches of a text input differ in
rows and source width from one to the next, so a `tf.function(jit_compile=True)` fed them directly compiles
for nearly every batch. `XlaTextTranslator` (a `TextTranslator` whose decoder compiles under XLA) pads each
batch's rows up to a power of two and its source (and target prefix) width up to a multiple of `WIDTH_STEP`, so
repeated calls (a service translating a sentence or a few a request) reuse a handful of programs. Padding changes
no output: padded source positions are masked, each row's length cap counts its own non-padding ids
(`constraints.plan_lengths`), and the extra rows repeat the first one and are dropped.

Where this pays is measured, not assumed (benchmarks/NOTES.md, entry 32): per call XLA decodes small batches
faster than graph mode, but a command translating a file meets a new shape every few batches and spends more
compiling than it saves, so the commands decode in graph mode (`cli/_precision_flag.py`'s `COMMAND_PATH`, the line
they log).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from tf_transformer.decoding.text import TextTranslator

# Source and prefix widths are padded up to a multiple of this: sentences of 1-8 pieces share one program, and
# the padding costs at most 7 masked positions a row.
WIDTH_STEP = 8


class XlaTextTranslator(TextTranslator):
    """A `TextTranslator` (the same arguments, call and results) whose `decode` and `decode_with_prefix` compile
    under XLA, each batch padded to a bucketed shape first (see the module). For a service translating a sentence
    or a few a call, where shapes come back: once a shape is compiled (seconds), a call is faster than in graph
    mode (benchmarks/NOTES.md entry 32); not for files, whose large batches of ever new shapes cost more to compile
    than XLA saves. With `method="sample"` the samples differ from graph mode's (XLA's random stream; reproducible
    for a given seed and padded shape).

    Attributes: those of `TextTranslator`, and `shapes`: the padded shapes decoded so far, one XLA program each
    (rows and source width, and the prefix width for calls with prefixes).

    Example:

        translator = XlaTextTranslator(model, tokenizer, DecodingSettings(beam_size=4))
        translator(["A dog runs."])  # compiles the shape of 1 sentence of up to 7 pieces, then reuses it
    """

    jit_compile = True

    def __init__(self, *args, **kwargs):
        self.shapes = set()
        super().__init__(*args, **kwargs)

    def _decode_batch(self, source_ids: np.ndarray, prefix_ids: Optional[np.ndarray]):
        rows = len(source_ids)
        padded_rows = bucketed_rows(rows)
        source = pad_batch(source_ids, padded_rows)
        prefix = None if prefix_ids is None else pad_batch(prefix_ids, padded_rows)
        self.shapes.add(source.shape if prefix is None else source.shape + prefix.shape[1:])
        ids, scores = super()._decode_batch(source, prefix)
        return ids[:rows], scores[:rows]


def bucketed_rows(rows: int) -> int:
    """The next power of two >= `rows` (>= 1)."""
    return 1 << max(rows - 1, 0).bit_length()


def pad_batch(ids: np.ndarray, rows: int) -> np.ndarray:
    """int32 `ids` `[batch, width]` padded to `[rows, width rounded up to WIDTH_STEP]`: 0 columns on the right,
    copies of the first row below (a row of padding alone would be an empty source)."""
    batch, width = ids.shape
    padded = np.zeros((rows, max(-(-width // WIDTH_STEP), 1) * WIDTH_STEP), np.int32)
    padded[:batch, :width] = ids
    padded[batch:, :width] = ids[0]
    return padded
