"""End to end: a small Transformer trained on the copy task is decoded into exact copies."""

import keras
import numpy as np
import pytest

import tf_transformer as tft
from tf_transformer.data import Tokenizer, synthetic_pairs, synthetic_translation_dataset
from tf_transformer.decoding import TextTranslator, beam_search, greedy_decode, score_ids, translate
from tf_transformer.decoding.alignment import align_ids
from tf_transformer.decoding.settings import EXTRA_DECODE_LENGTH, DecodingSettings
from tf_transformer.training import synthetic_task_config

HELD_OUT = 50
TRAIN_STEPS = 500


@pytest.fixture(scope="module")
def copy_model():
    # One layer each way learn the copy task in TRAIN_STEPS steps (~35 s on 2 cores). The rate decays to 0 over
    # them: at a constant 2e-3 the last step's weights copied only 88% on an AVX2-only CPU with oneDNN forced on.
    keras.utils.set_random_seed(0)
    config = synthetic_task_config(num_encoder_layers=1, num_decoder_layers=1, d_ff=128, max_length=32)
    model = tft.Transformer(config)
    learning_rate = keras.optimizers.schedules.CosineDecay(2e-3, TRAIN_STEPS)
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate, beta_2=0.98, epsilon=1e-9),
        loss=tft.MaskedCrossEntropy(0.0, config.pad_id),
    )
    train = synthetic_translation_dataset("copy", TRAIN_STEPS * 64, 64, max_length=8, seed=0, shuffle=False)
    model.fit(train, epochs=1, verbose=0, shuffle=False)
    return model


@pytest.fixture(scope="module")
def held_out():
    pairs = synthetic_pairs("copy", HELD_OUT, max_length=8, seed=123)
    sources = np.zeros((HELD_OUT, 9), np.int32)
    for row, (source, _) in enumerate(pairs):
        sources[row, : len(source) + 1] = source + [2]
    return sources, [target + [2] for _, target in pairs]


def exact_copies(ids, targets, helpers):
    return np.mean([helpers.strip(row) == target for row, target in zip(np.asarray(ids), targets, strict=True)])


def test_greedy_and_beam_search_copy_held_out_sequences(copy_model, held_out, helpers):
    sources, targets = held_out
    greedy_ids, greedy_scores = greedy_decode(copy_model, sources)
    beam_ids, beam_scores = beam_search(copy_model, sources, DecodingSettings(beam_size=4, n_best=2))
    # Exact copies of the 50 held-out sequences, measured for training seeds 0, 1, 2 on an AVX2-only CPU: 1.0 for
    # each, greedy and beam, with oneDNN (TF_ENABLE_ONEDNN_OPTS=1) and without. The bar leaves room for other CPUs.
    assert exact_copies(greedy_ids, targets, helpers) >= 0.9
    assert exact_copies(beam_ids[:, 0], targets, helpers) >= 0.9
    helpers.check_output_convention(beam_ids)
    # The copy is the best hypothesis, but not the only one: the second is a different, worse sequence.
    assert all(helpers.strip(a) != helpers.strip(b) for a, b in beam_ids.numpy())
    assert np.all(beam_scores[:, 0] > beam_scores[:, 1])
    # Beam search is never worse than greedy search under the same length-penalised score.
    lengths = np.array([len(helpers.strip(row)) for row in greedy_ids.numpy()])
    assert np.all(beam_scores[:, 0] >= greedy_scores / helpers.length_penalty(lengths, 0.6) - 1e-5)
    # The public entry point defaults to the paper's beam 4, alpha 0.6.
    result = translate(copy_model, sources[:8])
    np.testing.assert_array_equal(result.ids[:, 0], beam_ids[:8, 0])
    np.testing.assert_allclose(result.scores[:, 0], beam_scores[:8, 0], atol=1e-5)


def test_a_trained_models_beam_scores_are_score_ids_of_its_hypotheses(copy_model, held_out, helpers):
    # The trained model ends its hypotheses with EOS of its own choice (the untrained one of test_scoring.py
    # reaches the length cap): length_penalty=0 makes beam search report raw log-probability sums.
    sources = held_out[0][:8]
    ids, scores = beam_search(copy_model, sources, DecodingSettings(beam_size=4, length_penalty=0.0, n_best=3))
    ids, scores = ids.numpy(), scores.numpy()
    caps = np.minimum((sources != 0).sum(axis=1) + EXTRA_DECODE_LENGTH, copy_model.config.max_length)
    lengths = np.array([[len(helpers.strip(row)) for row in hypotheses] for hypotheses in ids])
    assert np.all(lengths < caps[:, np.newaxis])  # every hypothesis chose its EOS before the cap
    result = score_ids(copy_model, np.repeat(sources, 3, axis=0), ids.reshape(8 * 3, -1))
    np.testing.assert_allclose(result.log_probs.numpy(), scores.reshape(-1), atol=1e-4)
    np.testing.assert_array_equal(result.num_tokens.numpy(), lengths.reshape(-1))


# The copy model's symbols as WordPiece tokens: id 3 is [UNK]; a word starts with one of "a".."i" (ids 4 .. 12)
# and goes on with "##a".."##j" (ids 13 .. 22), so "bad" is three pieces, "b", "##a" and "##d".
COPY_VOCAB = ["[PAD]", "[BOS]", "[EOS]", "[UNK]", *"abcdefghi", *(f"##{letter}" for letter in "abcdefghij")]


def test_the_word_alignment_of_a_copy_is_the_identity(copy_model):
    tokenizer = Tokenizer.from_wordpiece(COPY_VOCAB)
    # 4 to 8 pieces each, as in training; words of one, two and three pieces, in several orders.
    sentences = ["bad cab f", "a bb c dd", "ihgj f e", "ace bdf g", "hi ij a b c", "ab cd ef gh", "i h g f"]
    # Greedy search only (beam search's copies are the same): the alignment is of the output, whichever decoder.
    results = TextTranslator(copy_model, tokenizer, DecodingSettings(method="greedy"), with_alignments=True)(sentences)
    for sentence, [(text, _, links)] in zip(sentences, results, strict=True):
        assert text == sentence
        assert links == [(i, i) for i in range(len(sentence.split()))], sentence
    # Every piece's attention points at its own source piece, not only the words'.
    ids = tokenizer.tokenize(sentences).to_list()
    sources = np.zeros((len(ids), 9), np.int32)
    for row, pieces in enumerate(ids):
        sources[row, : len(pieces) + 1] = pieces + [2]
    weights = align_ids(copy_model, sources, sources).numpy()
    for row, pieces in enumerate(ids):
        np.testing.assert_array_equal(weights[row, : len(pieces), : len(pieces)].argmax(axis=-1), range(len(pieces)))
