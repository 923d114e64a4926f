"""Classify sequences of events with the encoder-only `SequenceClassifier` and plain Keras `model.fit`.

    python examples/classify_events.py --epochs=5 --steps_per_epoch=100

The data is generated here. A session is a sequence of user events (login, search, add_to_cart, ...); it is
suspicious when a password reset comes *before* a change of payment details. Half the normal sessions hold
both events in the other order, so counting events is not enough: the model has to use their order, which
self-attention sees through the position encodings. Replace `make_sessions` with your own event logs: any
sequence of ids, 0 for padding, with one label per sequence.
"""

import argparse
import json

import keras
import numpy as np
import tensorflow as tf

import tf_transformer as tft

EVENTS = [
    "login", "logout", "search", "view_item", "add_to_cart", "remove_from_cart", "checkout", "rate_item",
    "contact_support", "change_email", "password_reset", "change_payment",
]  # fmt: skip
EVENT_IDS = {name: index + 1 for index, name in enumerate(EVENTS)}  # id 0 is padding
FIRST, THEN = EVENT_IDS["password_reset"], EVENT_IDS["change_payment"]


def make_sessions(count, min_length, max_length, seed):
    """`count` sessions `[count, max_length]` (0-padded ids) and labels `[count]`: 1 = suspicious, half of them."""
    rng = np.random.default_rng(seed)
    ordinary = [EVENT_IDS[name] for name in EVENTS if EVENT_IDS[name] not in (FIRST, THEN)]
    ids = np.zeros((count, max_length), np.int32)
    labels = rng.integers(0, 2, size=count).astype(np.int32)
    for row, label in enumerate(labels):
        length = int(rng.integers(min_length, max_length + 1))
        session = rng.choice(ordinary, size=length)
        kind = "suspicious" if label else rng.choice(["reversed", "partial"])
        if kind != "partial":
            # Two distinct positions, in order: FIRST then THEN when suspicious, the other way round otherwise.
            early, late = np.sort(rng.choice(length, size=2, replace=False))
            session[early], session[late] = (FIRST, THEN) if kind == "suspicious" else (THEN, FIRST)
        else:
            session[rng.integers(length)] = rng.choice([FIRST, THEN])  # only one of the two events
        ids[row, :length] = session
    return ids, labels


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train_sessions", type=int, default=20_000)
    parser.add_argument("--test_sessions", type=int, default=2_000)
    parser.add_argument("--min_length", type=int, default=4, help="fewest events in a session")
    parser.add_argument("--max_length", type=int, default=24, help="most events in a session")
    parser.add_argument("--d_model", type=int, default=64)
    parser.add_argument("--num_heads", type=int, default=4)
    parser.add_argument("--num_layers", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--steps_per_epoch", type=int, default=100)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)  # weights and dropout

    # The encoder's settings come from a TransformerConfig; the classifier ignores the decoder fields.
    config = tft.TransformerConfig.from_preset("tiny").replace(
        vocab_size=len(EVENTS) + 1,
        max_length=args.max_length,
        d_model=args.d_model,
        d_ff=4 * args.d_model,
        num_heads=args.num_heads,
        num_encoder_layers=args.num_layers,
    )
    model = tft.SequenceClassifier(config, num_classes=2)  # mean pooling over the real (non-padding) events
    model.compile(
        optimizer=keras.optimizers.Adam(args.learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )

    train_ids, train_labels = make_sessions(args.train_sessions, args.min_length, args.max_length, args.seed)
    test_ids, test_labels = make_sessions(args.test_sessions, args.min_length, args.max_length, args.seed + 1)
    train = (
        tf.data.Dataset.from_tensor_slices((train_ids, train_labels))
        .shuffle(len(train_ids), seed=args.seed)
        .repeat()
        .batch(args.batch_size)
        .prefetch(tf.data.AUTOTUNE)
    )
    test = tf.data.Dataset.from_tensor_slices((test_ids, test_labels)).batch(256)
    # shuffle=False: the dataset shuffles itself (Keras cannot shuffle a tf.data.Dataset).
    history = model.fit(train, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, shuffle=False)

    results = model.evaluate(test, return_dict=True, verbose=0)
    summary = {
        "loss": history.history["loss"],
        "test_loss": results["loss"],
        "test_accuracy": results["accuracy"],
        "chance": float(max(test_labels.mean(), 1 - test_labels.mean())),  # always answering the larger class
    }
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
