"""TFDS translation datasets (e.g. wmt14_translate/de-en, ted_hrlr_translate/pt_to_en) as a `ParallelCorpus`."""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

from tf_transformer.data.corpus import ParallelCorpus
from tf_transformer.data.errors import DataError

# Our split names -> TFDS split names.
TFDS_SPLITS = {"train": "train", "valid": "validation", "test": "test"}


class TfdsCorpus(ParallelCorpus):
    """One split of a TFDS translation builder, as (source, target) string pairs.

    The builder is found with `tfds.builder(name, data_dir=data_dir)`. Unless `offline`, the dataset is
    downloaded and prepared on first use (`download_and_prepare`, which TFDS skips when it is prepared);
    offline, only a prepared copy under `data_dir` is read and a missing one is a `DataError` saying how to
    prepare it. Under `tfds.testing.mock_data` both work without network.

    Args:
        name: the builder, with its config, e.g. "wmt14_translate/de-en".
        split: "train", "valid" (TFDS "validation") or "test".
        source_lang, target_lang: keys of the builder's Translation feature; None takes the builder's
            `supervised_keys` (e.g. ("de", "en") for wmt14_translate/de-en), so set both to reverse it.
        data_dir: TFDS data_dir; None is TFDS's default (~/tensorflow_datasets).
        offline: never download.
        shuffle_files: read the shards in a shuffled order (seeded by `seed`).
        seed: the file-shuffle seed.

    Raises:
        DataError: unknown builder or split, languages not in the dataset, or (offline) not prepared.
    """

    def __init__(
        self,
        name: str,
        split: str,
        source_lang: Optional[str] = None,
        target_lang: Optional[str] = None,
        data_dir: Optional[str] = None,
        offline: bool = False,
        shuffle_files: bool = False,
        seed: Optional[int] = None,
    ):
        import tensorflow_datasets as tfds  # slow to import; only TFDS users pay for it

        if split not in TFDS_SPLITS:
            raise DataError(f"split: unknown split {split!r}. Fix: use one of {', '.join(TFDS_SPLITS)}.")
        try:
            self.builder = tfds.builder(name, data_dir=data_dir)
        except tfds.core.registered.DatasetNotFoundError as error:
            first_line = str(error).splitlines()[0]
            raise DataError(
                f"dataset: {first_line} Fix: use a TFDS translation builder, e.g. --dataset=tfds:wmt14_translate/de-en."
            ) from None
        features = self.builder.info.features
        keys = sorted(features.keys()) if hasattr(features, "keys") else []
        supervised = self.builder.info.supervised_keys
        if source_lang is None and target_lang is None:
            if not supervised or len(supervised) != 2 or not all(isinstance(key, str) for key in supervised):
                raise DataError(
                    f"{name} has no supervised (source, target) keys. Fix: set --source_lang and --target_lang "
                    f"to two of its features: {', '.join(keys)}."
                )
            source_lang, target_lang = supervised
        elif source_lang is None or target_lang is None:
            raise DataError(
                f"{name}: set both --source_lang and --target_lang, or neither to use its supervised keys {supervised}."
            )
        for flag, lang in (("--source_lang", source_lang), ("--target_lang", target_lang)):
            if lang not in keys:
                raise DataError(
                    f"{name} has no language {lang!r}. Fix: set {flag} to one of its features: {', '.join(keys)}."
                )
        self.name, self.split = name, split
        self.source_lang, self.target_lang = source_lang, target_lang
        self.offline, self.shuffle_files, self.seed = offline, shuffle_files, seed
        self.description = f"tfds {name} {source_lang}-{target_lang} {split}"
        if not offline:
            self.builder.download_and_prepare()
        self._check_readable()

    def _check_readable(self):
        # Fail here, when the pipeline is built, rather than at the first training step.
        try:
            self._read()
        except AssertionError as error:  # TFDS's way of saying "not prepared"
            raise DataError(
                f"{self.name} is not prepared under {self.builder.data_dir} ({error}). Fix: prepare it once with "
                f"network (`tfds build {self.name} --data_dir=DIR`, or run without --tfds_offline) and pass "
                "--tfds_data_dir=DIR."
            ) from None
        except (KeyError, ValueError) as error:
            raise DataError(
                f"{self.name} has no split {TFDS_SPLITS[self.split]!r} ({error}). Fix: use a split it has."
            ) from None

    def _read(self) -> tf.data.Dataset:
        import tensorflow_datasets as tfds

        read_config = tfds.ReadConfig(shuffle_seed=self.seed) if self.seed is not None else None
        return self.builder.as_dataset(
            split=TFDS_SPLITS[self.split], shuffle_files=self.shuffle_files, read_config=read_config
        )

    def raw_dataset(self) -> tf.data.Dataset:
        source_lang, target_lang = self.source_lang, self.target_lang
        return self._read().map(lambda example: (example[source_lang], example[target_lang]))
