"""Train a Transformer with plain Keras `model.fit` on this package's tf.data pipeline, then translate.

    python examples/train_with_fit.py --data_dir=../shared/data/multi30k --epochs=10 --steps_per_epoch=100
    python examples/train_with_fit.py --source=train.en --target=train.de    # your own aligned files

This is the way to embed tf_transformer in your own script. tools/train.py does the same job with
checkpoints, crash-safe resume and tf.distribute on top. Without --data_dir or --source, Multi30k is read
from $MULTI30K_DIR, or downloaded once into ~/.cache/tf_transformer.
"""

import argparse
import json
import os
import pathlib

import keras

import tf_transformer as tft
from tf_transformer.data import DataConfig, build_vocabulary, make_dataset


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", default=os.environ.get("MULTI30K_DIR"), help="a local Multi30k folder")
    parser.add_argument("--source", help="training source sentences, one a line (instead of Multi30k)")
    parser.add_argument("--target", help="training target sentences, aligned with --source")
    parser.add_argument("--preset", default="tiny", help="model preset: tiny, base, big, ...")
    parser.add_argument("--override", action="append", default=[], help="field=value model change, repeatable")
    parser.add_argument("--vocab_size", type=int, default=8000, help="subword vocabulary size")
    parser.add_argument("--vocab_sentences", type=int, default=100_000, help="sentences that train the vocabulary")
    parser.add_argument("--batch_tokens", type=int, default=4096, help="source + target tokens per batch")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--steps_per_epoch", type=int, default=100)
    parser.add_argument("--validation_steps", type=int, default=20, help="validation batches per epoch (0: none)")
    parser.add_argument("--sentence", default="A dog runs through the snow.", help="what to translate at the end")
    parser.add_argument("--beam_size", type=int, default=4, help="1: greedy search")
    parser.add_argument("--output_dir", default="runs/fit_example", help="vocab/, config.json and model.keras")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)  # weights and dropout
    output_dir = pathlib.Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    # 1. Data: aligned files or Multi30k, a SentencePiece vocabulary trained on them, and token-batched
    #    ((source_ids, target_input_ids), target_output_ids) batches.
    # The preset's model and how it trains (its warmup, learning-rate scale, label smoothing).
    recipe = tft.Recipe.load(args.preset).with_overrides(args.override)
    config, training = recipe.model, recipe.training
    data = dict(
        vocab_size=args.vocab_size,
        vocab_max_sentences=args.vocab_sentences,
        batch_tokens=args.batch_tokens,
        max_length=config.max_length,  # the longest pairs the model accepts
        seed=args.seed,
    )
    if args.source or args.target:
        data_config = DataConfig(dataset="files", train_source=args.source, train_target=args.target, **data)
    else:
        data_config = DataConfig(dataset="multi30k", data_dir=args.data_dir, **data)
    tokenizer = build_vocabulary(data_config, output_dir / "vocab")
    train = make_dataset(data_config, tokenizer, "train")  # shuffled and repeated: fit needs steps_per_epoch
    validation = None
    if data_config.dataset == "multi30k" and args.validation_steps > 0:
        validation = make_dataset(data_config, tokenizer, "valid", training=False).repeat()

    # 2. The model, the paper's optimizer (Adam + warmup) and label-smoothed loss, and plain model.fit.
    config = config.replace(vocab_size=tokenizer.vocab_size)
    model = tft.Transformer(config)
    model.compile(
        optimizer=tft.make_optimizer(config.d_model, training["warmup_steps"], training["learning_rate_scale"]),
        loss=tft.MaskedCrossEntropy(label_smoothing=training["label_smoothing"]),
        metrics=[tft.MaskedAccuracy()],
    )
    # shuffle=False: make_dataset shuffles already (Keras cannot shuffle a tf.data.Dataset).
    history = model.fit(
        train,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        validation_data=validation,
        validation_steps=args.validation_steps,
        shuffle=False,
    )

    # 3. Save the model with its config (a temporary name, then a rename: never a half-written model.keras).
    config.to_json(output_dir / "config.json")
    model.save(output_dir / ".model.keras.tmp.keras")
    os.replace(output_dir / ".model.keras.tmp.keras", output_dir / "model.keras")

    # 4. Translate (keras.models.load_model(".../model.keras") gives the model back later).
    method = "greedy" if args.beam_size == 1 else "beam"
    settings = tft.decoding.DecodingSettings(method=method, beam_size=args.beam_size)
    [[(translation, score)]] = tft.decoding.translate_texts(model, tokenizer, [args.sentence], settings)
    summary = {
        "loss": history.history["loss"],
        "val_loss": history.history.get("val_loss"),
        "sentence": args.sentence,
        "translation": translation,
        "score": score,
        "model": str(output_dir / "model.keras"),
    }
    print(json.dumps(summary, indent=2, ensure_ascii=False))
    return summary


if __name__ == "__main__":
    main()
