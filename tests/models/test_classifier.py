"""SequenceClassifier: learns a generated event-sequence task, ignores padding, saves and loads."""

import keras
import numpy as np
import pytest
from keras.ops import convert_to_numpy

import tf_transformer as tft
from tf_transformer.config import ConfigError

CONFIG = tft.TransformerConfig(
    vocab_size=16,
    d_model=32,
    d_ff=64,
    num_heads=4,
    num_encoder_layers=1,
    num_decoder_layers=0,
    max_length=32,
    dropout=0.0,
)


def majority_event_task(num_examples, seed):
    """Sequences of event ids 3..15; the label is which of events 3, 4, 5 occurs most often (0, 1 or 2)."""
    rng = np.random.default_rng(seed)
    sequences = np.zeros((num_examples, 16), "int32")
    labels = np.zeros(num_examples, "int32")
    for row in range(num_examples):
        length = rng.integers(8, 17)
        label = rng.integers(0, 3)
        counts = rng.multinomial(length - 4, [0.15, 0.15, 0.15, 0.55])
        counts[label] += 4  # the winner is clear
        events = np.concatenate(
            [np.full(counts[0], 3), np.full(counts[1], 4), np.full(counts[2], 5), rng.integers(6, 16, size=counts[3])]
        )
        sequences[row, :length] = rng.permutation(events)
        labels[row] = label
    return sequences, labels


def test_learns_a_generated_event_sequence_task():
    keras.utils.set_random_seed(3)
    model = tft.SequenceClassifier(CONFIG, num_classes=3)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    x, y = majority_event_task(3000, seed=0)
    x_test, y_test = majority_event_task(500, seed=1)
    model.fit(x, y, batch_size=64, epochs=6, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    assert accuracy >= 0.9


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_extra_padding_leaves_logits_unchanged(pooling):
    model = tft.SequenceClassifier(CONFIG, num_classes=4, pooling=pooling)
    x, _ = majority_event_task(4, seed=2)
    padded = np.pad(x, [[0, 0], [0, 7]])
    expected = convert_to_numpy(model(x, training=False))
    np.testing.assert_allclose(convert_to_numpy(model(padded, training=False)), expected, atol=1e-5)


def test_all_padding_row_is_finite():
    model = tft.SequenceClassifier(CONFIG, num_classes=2)
    assert np.isfinite(convert_to_numpy(model(np.zeros((2, 5), "int32")))).all()


def test_keras_file_round_trip(tmp_path):
    model = tft.SequenceClassifier(CONFIG.replace(position_encoding="learned"), num_classes=3, pooling="first")
    x, _ = majority_event_task(4, seed=3)
    expected = convert_to_numpy(model(x, training=False))
    model.save(tmp_path / "classifier.keras")
    loaded = keras.models.load_model(tmp_path / "classifier.keras")
    assert (loaded.num_classes, loaded.pooling) == (3, "first")
    np.testing.assert_array_equal(convert_to_numpy(loaded(x, training=False)), expected)


def test_bad_arguments_are_clear():
    with pytest.raises(ConfigError, match="num_classes"):
        tft.SequenceClassifier(CONFIG, num_classes=0)
    with pytest.raises(ConfigError, match="pooling"):
        tft.SequenceClassifier(CONFIG, num_classes=2, pooling="max")
