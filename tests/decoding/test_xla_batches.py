"""XlaTextTranslator: TextTranslator's translations under XLA, from a few bucketed shapes."""

import numpy as np
import pytest

from tf_transformer.data import Tokenizer
from tf_transformer.decoding import TextTranslator
from tf_transformer.decoding.settings import DecodingSettings
from tf_transformer.decoding.xla_batches import WIDTH_STEP, XlaTextTranslator, bucketed_rows, pad_batch

# 40 tokens, the tiny model's vocabulary size: every id it emits detokenizes.
VOCAB = ["[PAD]", "[BOS]", "[EOS]", "[UNK]", *"abcdefghijklmnopqrstuvwxyz", *(f"##{c}" for c in "abcdefghij")]
# Three sentences in one batch (3 rows, width 4 with the EOS), which the bucketing pads to 4 x 8 (rows to a power of
# two with copies of the first, width to a multiple of 8).
SENTENCES = ["a b c", "d e", "f"]
PREFIXES = ["a", "", "b c"]


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.from_wordpiece(VOCAB)


def test_xla_translates_as_the_graph_does_from_bucketed_shapes(one_layer_model, tokenizer):
    # Each new shape is an XLA compile of the whole decoder (seconds even for this model): the test keeps to two, of
    # greedy search, the cheapest to compile (beam search under XLA: tests/decoding/test_graph_modes.py).
    settings = DecodingSettings(method="greedy", max_decode_length="x+3")
    graph = TextTranslator(one_layer_model, tokenizer, settings)
    xla = XlaTextTranslator(one_layer_model, tokenizer, settings)
    check_same(xla(SENTENCES, target_prefixes=PREFIXES), graph(SENTENCES, target_prefixes=PREFIXES))
    assert xla.shapes == {(4, WIDTH_STEP, WIDTH_STEP)}  # rows, source width, prefix width
    # A service's calls of one sentence each: every sentence of up to 7 pieces (and its EOS) runs one program.
    for sentence in ["a b", "c d e f g h i"]:
        check_same(xla([sentence]), graph([sentence]))
    assert xla.shapes == {(4, WIDTH_STEP, WIDTH_STEP), (1, WIDTH_STEP)}


def check_same(got, expected):
    assert [[text for text, _ in hypotheses] for hypotheses in got] == [
        [text for text, _ in hypotheses] for hypotheses in expected
    ]
    np.testing.assert_allclose(
        [[score for _, score in hypotheses] for hypotheses in got],
        [[score for _, score in hypotheses] for hypotheses in expected],
        atol=1e-4,
    )


def test_pad_batch_rounds_rows_and_width_and_repeats_the_first_row():
    ids = np.array([[5, 6, 7, 2], [8, 2, 0, 0], [9, 9, 2, 0]], np.int32)
    padded = pad_batch(ids, bucketed_rows(3))
    assert padded.shape == (4, WIDTH_STEP)
    np.testing.assert_array_equal(padded[:3, :4], ids)
    np.testing.assert_array_equal(padded[3, :4], ids[0])
    assert not padded[:, 4:].any()
    assert [bucketed_rows(rows) for rows in (1, 2, 3, 4, 5, 64, 65)] == [1, 2, 4, 4, 8, 64, 128]
