"""`DataConfig`: where the sentence pairs come from, how they become subwords and how they are batched."""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from tf_transformer.config import ConfigError, JsonConfig, unknown_option

DATASETS = ("files", "multi30k", "tfds:<name>")
MULTI30K_LANGUAGES = ("en", "de", "fr")
VOCAB_TYPES = ("sentencepiece", "wordpiece")
SPM_MODEL_TYPES = ("unigram", "bpe")
LONG_PAIRS = ("drop", "truncate")
SPLITS = ("train", "valid", "test")
# SentencePiece vocabularies reserve ids 0..3 for <pad> <s> </s> <unk> and 256 ids for byte fallback.
MIN_SENTENCEPIECE_VOCAB = 4 + 256 + 1
_PATH_FIELDS = (
    "train_source",
    "train_target",
    "valid_source",
    "valid_target",
    "test_source",
    "test_target",
    "data_dir",
    "cache_dir",
    "tfds_data_dir",
)


@dataclasses.dataclass(frozen=True)
class DataConfig(JsonConfig):
    """The training data of a translation model, validated on creation; JSON in and out.

    A config is frozen: derive variants with `config.replace(field=value)` or
    `config.with_overrides(["field=value"])`, which validate again. Every invalid value raises
    `tf_transformer.config.ConfigError` naming the field and the fix. Files are not opened here; they are
    checked when a pipeline or vocabulary is built from the config.

    Attributes:
        dataset: "files" (parallel plain-text or gzip files), "multi30k" (Multi30k task 1) or
            "tfds:<name>" for a TFDS translation builder, e.g. "tfds:wmt14_translate/de-en".
        train_source, train_target: aligned files of the training split (dataset "files"; required).
        valid_source, valid_target: aligned files of the validation split (dataset "files"; optional, as a pair).
        test_source, test_target: aligned files of the test split (dataset "files"; optional, as a pair).
        source_lang, target_lang: multi30k: "en", "de" or "fr" (None: en -> de); tfds: feature keys of the
            builder's Translation feature (None: the builder's `supervised_keys`); files: informational only.
        data_dir: a local folder with the Multi30k files (train/val/test_2016_flickr.{lang}.gz); None
            downloads them once into `cache_dir`/multi30k.
        cache_dir: where downloads are cached; "~" is expanded when used.
        tfds_data_dir: TFDS `data_dir` (None: TFDS's default, ~/tensorflow_datasets).
        tfds_offline: never download: read only a prepared TFDS dataset, and fail clearly when it is missing.
        vocab_type: "sentencepiece" (one joint model) or "wordpiece" (tensorflow-text's BERT tokenizer).
        vocab_size: requested vocabulary size, special tokens included (the built size may be smaller
            for WordPiece; `Tokenizer.vocab_size` is the truth).
        spm_model_type: SentencePiece algorithm, "unigram" or "bpe".
        lowercase: the vocabulary lowercases (case-folds) all text it reads: training pairs on both sides, and
            what the trained model translates, so its translations are lowercased too. SentencePiece does it
            in its own normalizer (rule "nmt_nfkc_cf"; WordPiece: `lower_case`, which also strips accents),
            so it is part of the vocabulary and travels with every export. What published Multi30k figures
            train on (lowercased text); the default keeps case.
        vocab_max_sentences: at most this many sentences (source and target together, sampled with
            `seed`) train the vocabulary.
        batch_tokens: source + target token positions per batch, padding included (the paper's batches held
            about 25000 source and 25000 target tokens: 50000 here; the default suits a CPU).
        batch_multiple: full training batches hold a multiple of this many pairs; the trainer raises it to
            a multiple of the number of replicas too, so every replica gets the same share.
        max_length: most tokens per side, the EOS / BOS included; must not exceed the model's max_length.
        long_pairs: what happens to a pair with a side longer than `max_length`: "drop" or "truncate".
        shuffle_buffer: pairs in the training shuffle buffer; 0 disables shuffling.
        seed: seeds shuffling and vocabulary sampling; None: random shuffles (sampling uses 0).
        deterministic: identical batches on every run: sets `tf.data.Options.deterministic` and seeds the
            shuffle with `seed`, or 0 when `seed` is None. Slower than the default.
        subword_nbest_size, subword_alpha: subword regularization (Kudo 2018): the training pairs are cut into
            pieces sampled anew each time they are read, from the `subword_nbest_size` best segmentations of the
            SentencePiece vocabulary (-1: all of them), with probabilities raised to `subword_alpha` (lower:
            flatter, more varied). 0 (the default) cuts them the one best way, as validation, translation and
            export always do. Needs a SentencePiece vocabulary, and neither `deterministic` batches nor
            multi-worker training (tf-text's sampling takes no seed).
    """

    # Subword sampling: part of a preset's recipe (`tf_transformer.recipe`; tft-train has no flags for it), and the
    # fields a restart may change (every other field must stay that of the run's data_config.json).
    SUBWORD_FIELDS = ("subword_nbest_size", "subword_alpha")

    dataset: str = "multi30k"
    train_source: Optional[str] = None
    train_target: Optional[str] = None
    valid_source: Optional[str] = None
    valid_target: Optional[str] = None
    test_source: Optional[str] = None
    test_target: Optional[str] = None
    source_lang: Optional[str] = None
    target_lang: Optional[str] = None
    data_dir: Optional[str] = None
    cache_dir: str = "~/.cache/tf_transformer"
    tfds_data_dir: Optional[str] = None
    tfds_offline: bool = False
    vocab_type: str = "sentencepiece"
    vocab_size: int = 8000
    spm_model_type: str = "unigram"
    lowercase: bool = False
    vocab_max_sentences: int = 1_000_000
    batch_tokens: int = 4096
    batch_multiple: int = 1
    max_length: int = 256
    long_pairs: str = "drop"
    shuffle_buffer: int = 10_000
    seed: Optional[int] = None
    deterministic: bool = False
    subword_nbest_size: int = 0
    subword_alpha: float = 0.1

    def __post_init__(self):
        for name in _PATH_FIELDS:
            value = getattr(self, name)
            if isinstance(value, os.PathLike):
                object.__setattr__(self, name, os.fspath(value))  # keep JSON plain
        self._check_types()
        self._check_values()

    # ----------------------------------------------------------------------------------------- validation

    def _check_types(self):
        self._check_field_types(_EXAMPLES)

    def _check_values(self):
        if self.dataset not in ("files", "multi30k") and not self.dataset.startswith("tfds:"):
            raise ConfigError(
                f"dataset: unknown dataset {self.dataset!r}. Fix: use 'files', 'multi30k' or 'tfds:<name>' "
                "(e.g. 'tfds:wmt14_translate/de-en')."
            )
        if self.dataset.startswith("tfds:") and not self.tfds_name:
            raise ConfigError(
                "dataset: 'tfds:' needs a builder name. Fix: write e.g. dataset='tfds:wmt14_translate/de-en'."
            )
        if self.dataset == "files":
            for name in ("train_source", "train_target"):
                if not getattr(self, name):
                    raise ConfigError(
                        f"{name}: dataset 'files' needs the training files. Fix: pass --{name}=PATH "
                        "(plain text or gzip, one sentence a line, aligned with the other side)."
                    )
        for split in ("valid", "test"):
            source, target = getattr(self, f"{split}_source"), getattr(self, f"{split}_target")
            if (source is None) != (target is None):
                missing = f"{split}_target" if target is None else f"{split}_source"
                raise ConfigError(
                    f"{missing}: the {split} split needs both sides. Fix: pass --{missing}=PATH, or neither file."
                )
        if self.dataset == "multi30k":
            for name in ("source_lang", "target_lang"):
                value = getattr(self, name)
                if value is not None and value not in MULTI30K_LANGUAGES:
                    raise ConfigError(
                        f"{name}: Multi30k has no language {value!r}. Fix: use one of {', '.join(MULTI30K_LANGUAGES)}."
                    )
        if self.source_lang is not None and self.source_lang == self.target_lang:
            raise ConfigError(
                f"target_lang: equals source_lang ({self.source_lang!r}). Fix: translate between two languages."
            )
        if self.vocab_type not in VOCAB_TYPES:
            raise ConfigError(unknown_option("vocab_type", self.vocab_type, VOCAB_TYPES))
        if self.spm_model_type not in SPM_MODEL_TYPES:
            raise ConfigError(unknown_option("spm_model_type", self.spm_model_type, SPM_MODEL_TYPES))
        if self.long_pairs not in LONG_PAIRS:
            raise ConfigError(unknown_option("long_pairs", self.long_pairs, LONG_PAIRS))
        minimum = MIN_SENTENCEPIECE_VOCAB if self.vocab_type == "sentencepiece" else 8
        if self.vocab_size < minimum:
            raise ConfigError(
                f"vocab_size: {self.vocab_size} is too small for a {self.vocab_type} vocabulary (at least "
                f"{minimum}: 4 special tokens" + (" and 256 byte pieces)" if minimum > 8 else ")") + ". "
                "Fix: use e.g. vocab_size=8000."
            )
        if self.vocab_max_sentences < 1:
            raise ConfigError(
                f"vocab_max_sentences: must be positive, got {self.vocab_max_sentences}. Fix: use e.g. 1000000."
            )
        if self.max_length < 2:
            raise ConfigError(
                f"max_length: must be >= 2 (one token and the EOS), got {self.max_length}. Fix: use e.g. 256."
            )
        if self.batch_multiple < 1:
            raise ConfigError(
                f"batch_multiple: must be >= 1, got {self.batch_multiple}. Fix: use 1, or the number of replicas."
            )
        if self.batch_tokens < 2 * self.max_length:
            raise ConfigError(
                f"batch_tokens: {self.batch_tokens} cannot hold one pair of max_length={self.max_length} "
                f"(source + target = {2 * self.max_length} positions). Fix: raise batch_tokens to at least "
                f"{2 * self.max_length} or lower max_length."
            )
        if self.shuffle_buffer < 0:
            raise ConfigError(
                f"shuffle_buffer: must be >= 0 (0 disables shuffling), got {self.shuffle_buffer}. Fix: use e.g. 10000."
            )
        if self.seed is not None and not 0 <= self.seed < 2**31:
            raise ConfigError(f"seed: must be in [0, 2**31) or null, got {self.seed}. Fix: use e.g. seed=0.")
        if self.samples_subwords and self.subword_alpha <= 0:
            raise ConfigError(
                f"subword_alpha: must be positive when subword_nbest_size samples, got {self.subword_alpha}. "
                "Fix: use e.g. subword_alpha=0.1, or subword_nbest_size=0 to turn sampling off."
            )

    # ----------------------------------------------------------------------------------------- derived

    @property
    def tfds_name(self) -> Optional[str]:
        """The TFDS builder name of a "tfds:<name>" dataset, else None."""
        return self.dataset[len("tfds:") :] if self.dataset.startswith("tfds:") else None

    @property
    def samples_subwords(self) -> bool:
        """Whether training samples its subword segmentations (`subword_nbest_size` other than 0 and 1)."""
        return self.subword_nbest_size not in (0, 1)

    @property
    def shuffle_seed(self) -> Optional[int]:
        """The seed for shuffles: `seed`, or 0 in deterministic mode, or None (random)."""
        if self.seed is not None:
            return self.seed
        return 0 if self.deterministic else None


def vocabulary_lowercases(vocabulary_record: dict) -> bool:
    """Whether a vocabulary case-folds, from its tokenizer.json: SentencePiece's "*_cf" normalization (as
    `build_vocabulary` makes it for `lowercase`) or WordPiece's `lower_case`. What a trained model reads and writes
    is its vocabulary's, not a data config's: the commands that score or fine-tune one ask this."""
    return str(vocabulary_record.get("normalization", "")).endswith("_cf") or bool(
        vocabulary_record.get("lower_case", False)
    )


_EXAMPLES = {"seed": 0, "source_lang": "en", "target_lang": "de", "data_dir": "../shared/data/multi30k"}
_EXAMPLES.update({f.name: f.default for f in dataclasses.fields(DataConfig) if f.default is not None})
_EXAMPLES.update({name: "path/to/file" for name in _PATH_FIELDS if name not in _EXAMPLES})
