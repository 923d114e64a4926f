"""Word alignments: pieces to words, the hard links, and the teacher-forced attention they come from.

The end-to-end check, a trained copy model whose alignment is the identity, is in test_copy_task.py (it reuses
that file's trained model).
"""

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.data import train_sentencepiece
from tf_transformer.decoding import DecodingSettings, greedy_decode
from tf_transformer.decoding.alignment import (
    align_ids,
    alignment_layer,
    format_alignment,
    source_word_maps,
    target_word_maps,
    word_alignment,
)
from tf_transformer.decoding.text import format_results

SENTENCES = [
    "A dog runs in the snow.",
    "Two  men (talking) 你好 🐶x",
    "  Ein Hund rennt im Schnee.  ",
]


@pytest.fixture(scope="module")
def spm_tokenizer(tmp_path_factory):
    # A small vocabulary, so that most words are several pieces; byte fallback for the characters it never saw.
    lines = [
        "A dog runs in the snow.", "Two men are talking.", "Ein Hund rennt im Schnee.", "Zwei Männer reden.",
        "A man in an orange hat.", "The dogs are running.", "Ein Mann mit einem Hut.", "Die Hunde rennen.",
    ] * 5  # fmt: skip
    return train_sentencepiece(lines, tmp_path_factory.mktemp("vocab"), vocab_size=300, seed=0)


def test_word_alignment_sums_source_pieces_and_averages_target_pieces():
    # 3 target pieces + EOS row, 4 source pieces + EOS column. Source words: "ab" = pieces 0, 1; "c" = 2; "d" = 3.
    # Target words: word 0 = piece 0, word 1 = pieces 1 and 2.
    weights = np.array(
        [
            [0.30, 0.20, 0.45, 0.00, 0.05],  # word 0: "ab" 0.50 against "c" 0.45: the sum of pieces wins
            [0.10, 0.10, 0.10, 0.60, 0.10],
            [0.05, 0.05, 0.80, 0.05, 0.05],  # word 1, the mean of rows 1, 2: ab 0.15, c 0.45, d 0.325 -> "c"
            [0.00, 0.00, 0.00, 0.00, 1.00],  # the EOS row, left out
        ]
    )
    links = word_alignment(weights, [0, 0, 1, 2, -1], [0, 1, 1, -1])
    assert links == [(0, 0), (1, 1)]
    # The maximum of single pieces would have said otherwise: piece 2 alone (0.45) beats piece 0 (0.30) in row 0,
    # and row 1 alone points at "d".
    assert np.argmax(weights[0, :4]) == 2 and np.argmax(weights[1, :4]) == 3
    # Left-out columns never win, however heavy: without word 0's pieces, row 0 goes to "c".
    assert word_alignment(weights, [-1, -1, 1, 2, -1], [0, 1, 1, -1]) == [(1, 0), (1, 1)]
    assert word_alignment(weights, [-1, -1, -1, -1, -1], [0, 1, 1, -1]) == []
    assert format_alignment([(0, 0), (2, 1), (1, 2)]) == "0-0 2-1 1-2"


def test_source_pieces_map_to_the_words_of_the_line(spm_tokenizer):
    maps = source_word_maps(spm_tokenizer, SENTENCES)
    ids = spm_tokenizer.tokenize(SENTENCES).to_list()
    pieces = spm_tokenizer.tokens()
    for sentence, words, row in zip(SENTENCES, maps, ids, strict=True):
        assert len(words) == len(row)  # one word per piece the model sees
        assert list(words) == sorted(words) and set(words) == set(range(len(sentence.split())))
        # Each word's pieces spell the word (SentencePiece's word marker aside; byte pieces as their bytes).
        for number, word in enumerate(sentence.split()):
            spelled = b"".join(
                bytes([int(pieces[t][1:-1], 16)]) if pieces[t].startswith("<0x") else pieces[t].encode()
                for t, w in zip(row, words, strict=True)
                if w == number
            )
            assert spelled.decode("utf-8").replace("\u2581", "") == word
    # The ids of tokenize_with_offsets are those of tokenize.
    assert spm_tokenizer.tokenize_with_offsets(SENTENCES)[0].to_list() == ids


def test_target_pieces_map_to_the_words_of_the_detokenized_text(spm_tokenizer):
    ids = spm_tokenizer.tokenize(SENTENCES).to_list()
    *maps, empty = target_word_maps(spm_tokenizer, ids + [[]])
    assert len(empty) == 0
    expected_maps = source_word_maps(spm_tokenizer, SENTENCES)
    for sentence, row, words, expected in zip(SENTENCES, ids, maps, expected_maps, strict=True):
        text = spm_tokenizer.detokenize(tf.constant(row)).numpy().decode()
        assert len(text.split()) == len(sentence.split())
        # From the detokenized prefixes, the same words as from the offsets in the source line.
        np.testing.assert_array_equal(words, expected)
    # A lone space marker goes with the word after it, and a trailing one with the last word.
    marker = spm_tokenizer.tokens().index("\u2581")
    first, second = spm_tokenizer.tokenize(["dog", "snow"]).to_list()
    assert target_word_maps(spm_tokenizer, [first + [marker] + second + [marker]])[0].tolist() == (
        [0] * len(first) + [1] * (len(second) + 1) + [1]
    )


def test_align_ids_is_the_head_mean_of_the_chosen_layers_cross_attention(tiny_model, helpers):
    sources = helpers.make_sources([6, 4], width=7, seed=11)
    targets, _ = greedy_decode(tiny_model, sources, DecodingSettings(max_decode_length=6))
    targets = targets.numpy()
    decoder_input = np.concatenate([np.ones((2, 1), np.int32), targets[:, :-1]], axis=1)
    cross = tiny_model.attention_weights(sources, decoder_input)["decoder_cross"]
    real = (targets != 0)[:, :, None] & (sources != 0)[:, None, :]
    for layer, index in [(None, 0), (-1, 1)]:  # 2 layers: the default, the penultimate, is layer 0
        expected = np.where(real, cross[index].numpy().mean(axis=1), 0.0)
        weights = align_ids(tiny_model, sources, targets, layer).numpy()
        np.testing.assert_allclose(weights, expected, atol=1e-6)
        # A distribution over the source, EOS included, in every real row; nothing in padded rows.
        np.testing.assert_allclose(weights.sum(axis=-1), (targets != 0).astype(np.float32), atol=1e-5)
    with pytest.raises(ValueError, match="alignment_layer: 2 is not a layer of a 2-layer decoder. Fix:"):
        align_ids(tiny_model, sources, targets, layer=2)
    assert alignment_layer(6) == 4 and alignment_layer(1) == 0 and alignment_layer(4, -1) == 3
    assert alignment_layer(2, 0) == 0 and alignment_layer(2, -2) == 0 and alignment_layer(2, 1) == 1


def test_format_results_appends_the_alignment():
    results = [[("Ein Hund", -1.5, [(1, 0), (1, 1)]), ("Hund", -2.0, [(1, 0)])], [("", 0.0, [])] * 2]
    assert format_results(results, scored=False) == ["Ein Hund ||| 1-0 1-1", " ||| "]
    assert format_results(results, scored=True) == [
        "0 ||| Ein Hund ||| -1.500000 ||| 1-0 1-1", "0 ||| Hund ||| -2.000000 ||| 1-0",
        "1 |||  ||| 0.000000 ||| ", "1 |||  ||| 0.000000 ||| ",
    ]  # fmt: skip
