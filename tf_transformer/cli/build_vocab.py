"""Builds the subword vocabulary of a training corpus (joint SentencePiece, or WordPiece) into a folder.

    tft-build-vocab --config=configs/multi30k.json --data_dir=../shared/data/multi30k --output_dir=vocab_multi30k
    tft-build-vocab --data_config=runs/multi30k/data_config.json --output_dir=vocab_again

The first builds the vocabulary of the README's run (Multi30k, the default --dataset, English to German, the
default --source_lang and --target_lang; 8,000 pieces: the config's vocab_size), the second the one of a
DataConfig JSON file, such as the data_config.json that tft-train writes into its model directory (flags given
override the file). For your own corpus: --dataset=files --train_source=FILE --train_target=FILE (plain or
gzip, one sentence a line) and --vocab_size=N.

The size is --vocab_size if given, else the vocab_size of --config (a preset or JSON file, with --override;
the default is tft-train's, "base": 37,000), so the vocabulary is the one tft-train would build with the same
flags; with --data_config and neither flag, the file's.

Writes spm.model + spm.vocab (or wordpiece.vocab), tokenizer.json and the data_config.json it used; prints the
vocabulary size and folder. Load it with `tf_transformer.data.Tokenizer.from_directory(DIR)`.
"""

import dataclasses
import os

from absl import app, flags

from tf_transformer.cli import exit_on, run_binary
from tf_transformer.config import ConfigError
from tf_transformer.data.config import DataConfig  # imports no TensorFlow, unlike build_vocabulary
from tf_transformer.data.errors import DataError
from tf_transformer.data.text_files import inspect_parallel_files
from tf_transformer.recipe import Recipe

_DEFAULTS = DataConfig()
_DATA_CONFIG = flags.DEFINE_string("data_config", None, "A DataConfig JSON file; flags given explicitly override it.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where to write the vocabulary (created if missing).")
# As tft-train's: its model config's vocab_size is the size of the vocabulary it builds.
_CONFIG = flags.DEFINE_string(
    "config", "base", "The recipe (a preset name or a JSON file) whose model's vocab_size is the default size."
)
_OVERRIDE = flags.DEFINE_multi_string("override", [], "field=value changes to the recipe (repeatable).")
flags.DEFINE_string("dataset", _DEFAULTS.dataset, "'files', 'multi30k' or 'tfds:<name>'.")
for _name in ("train_source", "train_target"):
    flags.DEFINE_string(_name, None, "Training file, plain or gzip, one sentence a line (dataset 'files').")
flags.DEFINE_string("source_lang", None, "Source language (multi30k: en/de/fr; tfds: feature key).")
flags.DEFINE_string("target_lang", None, "Target language (multi30k: en/de/fr; tfds: feature key).")
flags.DEFINE_string("data_dir", None, "Local Multi30k folder; unset downloads it into --cache_dir.")
flags.DEFINE_string("cache_dir", _DEFAULTS.cache_dir, "Download cache.")
flags.DEFINE_string("tfds_data_dir", None, "TFDS data_dir.")
flags.DEFINE_bool("tfds_offline", _DEFAULTS.tfds_offline, "Never download a TFDS dataset.")
flags.DEFINE_enum("vocab_type", _DEFAULTS.vocab_type, ["sentencepiece", "wordpiece"], "Vocabulary kind.")
flags.DEFINE_integer(
    "vocab_size", None, "Vocabulary size, special tokens included (default: the --config's vocab_size)."
)
flags.DEFINE_enum("spm_model_type", _DEFAULTS.spm_model_type, ["unigram", "bpe"], "SentencePiece algorithm.")
flags.DEFINE_bool("lowercase", _DEFAULTS.lowercase, "Case-fold all text (the vocabulary lowercases what it reads).")
flags.DEFINE_integer("vocab_max_sentences", _DEFAULTS.vocab_max_sentences, "Most sentences sampled for training.")
flags.DEFINE_integer("seed", None, "Sampling and training seed (unset: 0).")
_CONFIG_FLAGS = [
    "dataset",
    "train_source",
    "train_target",
    "source_lang",
    "target_lang",
    "data_dir",
    "cache_dir",
    "tfds_data_dir",
    "tfds_offline",
    "vocab_type",
    "vocab_size",
    "spm_model_type",
    "lowercase",
    "vocab_max_sentences",
    "seed",
]
FLAGS = flags.FLAGS


def data_config_from_flags() -> DataConfig:
    """The --data_config file (or the defaults) with the flags given on the command line applied."""
    base = DataConfig.from_json(_DATA_CONFIG.value).to_dict() if _DATA_CONFIG.value else {}
    given = {name: FLAGS[name].value for name in _CONFIG_FLAGS if FLAGS[name].present or not _DATA_CONFIG.value}
    model_config_given = FLAGS["config"].present or FLAGS["override"].present
    if not FLAGS["vocab_size"].present and (model_config_given or not _DATA_CONFIG.value):
        given["vocab_size"] = Recipe.load(_CONFIG.value, _OVERRIDE.value).model.vocab_size
    fields = {field.name for field in dataclasses.fields(DataConfig)}
    return DataConfig.from_dict({**base, **{k: v for k, v in given.items() if k in fields}})


def check_flags() -> DataConfig:
    """The data config of the flags, and with --dataset=files its two files read and checked (missing, empty,
    not UTF-8, misaligned), before TensorFlow starts; building the vocabulary does not read them again."""
    data_config = check_flag_values()
    if data_config.dataset == "files" and data_config.train_source and data_config.train_target:
        inspect_parallel_files(data_config.train_source, data_config.train_target, "--train_source", "--train_target")
    return data_config


def check_flag_values() -> DataConfig:
    """The data config of the flags, which checks its values: check_flags' first step, and tests/test_docs.py's
    on documented lines."""
    if not _OUTPUT_DIR.value:
        raise app.UsageError("--output_dir is required.")
    return data_config_from_flags()


def main(argv, data_config: DataConfig):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from tf_transformer.data import build_vocabulary  # not at the top: --help needs no TensorFlow

    with exit_on(ConfigError, DataError):
        tokenizer = build_vocabulary(data_config, _OUTPUT_DIR.value)
    data_config.to_json(os.path.join(_OUTPUT_DIR.value, "data_config.json"))
    print(f"vocabulary: {tokenizer.kind}, {tokenizer.vocab_size} tokens, in {os.path.abspath(_OUTPUT_DIR.value)}")


def run():
    """The `tft-build-vocab` command (its console script and the checkout's wrapper script call it)."""
    run_binary(__name__, main, check_flags=check_flags)


if __name__ == "__main__":
    run()
