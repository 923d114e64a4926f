"""Train anywhere, serve from TensorFlow: model.fit under JAX or PyTorch, then translate and export under TensorFlow.

    KERAS_BACKEND=jax python examples/train_anywhere.py --output_dir=runs/anywhere_jax
    KERAS_BACKEND=torch python examples/train_anywhere.py --output_dir=runs/anywhere_torch

The task copies sentences of made-up words, spelled with a 23-piece WordPiece vocabulary. Under KERAS_BACKEND (any
Keras backend) the script trains a small tft.Transformer with model.fit and saves model.keras, with the logits it
gives for held-out sources. Then a TensorFlow process (this script again, with --serve) loads model.keras, checks
that its logits are the trained model's (within 1e-4), translates the held-out sources with
tft.decoding.translate, exports a SavedModel for TensorFlow Serving and checks that the SavedModel's translations
are the same. The summary is printed as JSON; a failed check exits with an error that names it.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np

import tf_transformer as tft

# WordPiece pieces: ids 0-3 are [PAD] [BOS] [EOS] [UNK]; a word starts with one of "a".."i" (ids 4-12) and goes on
# with "##a".."##j" (ids 13-22), so the ids of a sentence are also its text ("bad cab" is b ##a ##d c ##a ##b).
VOCAB = ["[PAD]", "[BOS]", "[EOS]", "[UNK]", *"abcdefghi", *(f"##{letter}" for letter in "abcdefghij")]
WORD_STARTS, PIECES = range(4, 13), range(4, 23)
LOGITS_TOLERANCE = 1e-4  # float32 on different backends: the same arithmetic in another order


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="runs/anywhere", help="model.keras, held_out.npz and export/")
    parser.add_argument("--train_sentences", type=int, default=32_000, help="generated training pairs")
    parser.add_argument("--held_out", type=int, default=50, help="generated sentences never trained on")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--beam_size", type=int, default=4, help="decoding in TensorFlow, in process and exported")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--serve", action="store_true", help="the TensorFlow step alone, on a trained --output_dir")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    output_dir = pathlib.Path(args.output_dir)
    if not args.serve:
        trained = train(args, output_dir)
        if keras.backend.backend() != "tensorflow":  # a backend is fixed per process: serve from a new one
            summary = serve_in_tensorflow_process(args, output_dir)
            summary = {**trained, **summary}
            print(json.dumps(summary, indent=2))
            return summary
    summary = serve(args, output_dir)
    if not args.serve:
        summary = {**trained, **summary}
    print(json.dumps(summary, indent=2))
    return summary


def train(args, output_dir):
    """model.fit on the copy task under this process's Keras backend; saves model.keras and held_out.npz."""
    keras.utils.set_random_seed(args.seed)  # weights, dropout and the data below
    sources, targets_in, targets_out = copy_task(args.train_sentences, np.random.default_rng(args.seed))
    config = tft.TransformerConfig(
        vocab_size=len(VOCAB), d_model=32, d_ff=128, num_heads=4, num_encoder_layers=1, num_decoder_layers=1,
        max_length=32, dropout=0.0,
    )  # fmt: skip
    model = tft.Transformer(config)
    steps = args.epochs * -(-args.train_sentences // args.batch_size)
    model.compile(
        optimizer=keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(2e-3, steps), beta_2=0.98),
        loss=tft.MaskedCrossEntropy(label_smoothing=0.0),
        metrics=[tft.MaskedAccuracy()],
    )
    history = model.fit((sources, targets_in), targets_out, batch_size=args.batch_size, epochs=args.epochs, verbose=2)
    output_dir.mkdir(parents=True, exist_ok=True)
    model.save(output_dir / "model.keras")
    # The held-out sources and the trained model's logits for them: what the TensorFlow step must reproduce.
    held_out, held_out_in, _ = copy_task(args.held_out, np.random.default_rng(args.seed + 1))
    logits = keras.ops.convert_to_numpy(model((held_out, held_out_in), training=False))
    np.savez(output_dir / "held_out.npz", sources=held_out, targets_in=held_out_in, logits=logits)
    return {"trained_under": keras.backend.backend(), "loss": history.history["loss"]}


def copy_task(count, rng):
    """`count` sentences of 4-8 pieces: (sources + EOS, BOS + targets, targets + EOS), int32, 0-padded to 9."""
    sources, targets_in, targets_out = (np.zeros((count, 9), "int32") for _ in range(3))
    for row in range(count):
        pieces = rng.choice(PIECES, size=rng.integers(4, 9))
        pieces[0] = rng.choice(WORD_STARTS)  # a sentence starts with a word
        sources[row, : len(pieces) + 1] = targets_out[row, : len(pieces) + 1] = [*pieces, 2]
        targets_in[row, : len(pieces) + 1] = [1, *pieces]
    return sources, targets_in, targets_out


def serve_in_tensorflow_process(args, output_dir):
    """Runs `--serve` under TensorFlow in a child process; returns its summary."""
    command = [sys.executable, __file__, "--serve", f"--output_dir={output_dir}", f"--beam_size={args.beam_size}"]
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    result = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise SystemExit(f"the TensorFlow step failed (exit {result.returncode}); its output:\n{result.stdout}")
    printed = "\n" + result.stdout  # the summary is the last JSON object it prints
    return json.loads(printed[printed.rindex("\n{\n") + 1 :])


def serve(args, output_dir):
    """Under TensorFlow: loads model.keras, checks its logits, translates, exports and checks the SavedModel."""
    import tensorflow as tf

    from tf_transformer.data import Tokenizer
    from tf_transformer.decoding import DecodingSettings
    from tf_transformer.export import TranslationModule

    # Importing the class registers it with Keras, so load_model finds the one model.keras names (tft imports its
    # attributes on first use). compile=False: serving needs no optimizer, loss or metric.
    from tf_transformer.models import Transformer  # noqa: F401

    if keras.backend.backend() != "tensorflow":
        raise SystemExit(f"--serve needs KERAS_BACKEND=tensorflow, not {keras.backend.backend()}.")
    model = keras.models.load_model(output_dir / "model.keras", compile=False)
    held_out = np.load(output_dir / "held_out.npz")
    sources = held_out["sources"]
    logits = keras.ops.convert_to_numpy(model((sources, held_out["targets_in"]), training=False))
    logits_difference = float(np.abs(logits - held_out["logits"]).max())
    check(logits_difference <= LOGITS_TOLERANCE, f"the logits differ by {logits_difference} after loading")

    settings = DecodingSettings(beam_size=args.beam_size)
    ids = tft.decoding.translate(model, sources, settings).ids.numpy()[:, 0]
    tokenizer = Tokenizer.from_wordpiece(VOCAB)
    sentences = [text.decode() for text in tokenizer.detokenize(sources).numpy()]  # EOS ends each
    texts = [best for [(best, _)] in tft.decoding.translate_texts(model, tokenizer, sentences, settings)]

    module = TranslationModule(model, tokenizer, settings)
    export_dir = output_dir / "export" / "1"
    tf.saved_model.save(module, str(export_dir), signatures=module.signatures())
    served = tf.saved_model.load(str(export_dir)).signatures
    served_ids = served["translate_ids"](source_ids=tf.constant(sources))["output_ids"].numpy()
    served_texts = served["serving_default"](inputs=tf.constant(sentences))["outputs"].numpy()
    served_texts = [text.decode() for text in served_texts]
    check(all(map(same_ids, served_ids, ids)), "the SavedModel's translate_ids differ from tft.decoding.translate's")
    check(served_texts == texts, "the SavedModel's translations differ from tft.decoding.translate_texts'")
    return {
        "served_under": keras.backend.backend(),
        "logits_difference": logits_difference,
        "held_out_copied": float(np.mean(list(map(same_ids, ids, sources)))),
        "sentences": sentences[:3],
        "translations": served_texts[:3],
        "export": str(export_dir),
    }


def same_ids(a, b):
    """Two rows of ids ending with EOS are the same but for their padding (decoders pad to different widths)."""
    return np.array_equal(np.trim_zeros(np.asarray(a), "b"), np.trim_zeros(np.asarray(b), "b"))


def check(ok, problem):
    if not ok:
        raise SystemExit(f"train_anywhere: {problem}.")


if __name__ == "__main__":
    main()
