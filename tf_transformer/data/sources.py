"""`open_corpus`: the `ParallelCorpus` a `DataConfig` names (files, Multi30k or a TFDS dataset).

Not in corpus.py: the corpora import corpus.py for their base class, and this module imports the corpora, so
keeping the two apart keeps the imports one way (tests/test_imports.py checks that).
"""

from __future__ import annotations

from tf_transformer.data.config import SPLITS, DataConfig
from tf_transformer.data.corpus import ParallelCorpus
from tf_transformer.data.errors import DataError
from tf_transformer.data.files import FileCorpus
from tf_transformer.data.multi30k import multi30k_corpus
from tf_transformer.data.tfds_source import TfdsCorpus


def open_corpus(data_config: DataConfig, split: str, training: bool = False) -> ParallelCorpus:
    """The corpus of `split` ("train", "valid" or "test") that `data_config` names.

    Files are checked here, eagerly (existence, gzip, UTF-8, equal line counts), so a bad file fails before
    training starts; Multi30k without `data_dir` is downloaded (once) into `cache_dir`. `training` lets a
    TFDS corpus shuffle its files (seeded by `data_config.shuffle_seed`).

    Raises:
        DataError: a file is missing, unreadable, misaligned, or a split is not configured.
    """
    if split not in SPLITS:
        raise DataError(f"split: unknown split {split!r}. Fix: use one of {', '.join(SPLITS)}.")
    if data_config.dataset == "files":
        source, target = getattr(data_config, f"{split}_source"), getattr(data_config, f"{split}_target")
        if source is None:
            raise DataError(
                f"the {split} split has no files. Fix: pass --{split}_source=PATH and --{split}_target=PATH."
            )
        return FileCorpus(
            source,
            target,
            source_flag=f"--{split}_source",
            target_flag=f"--{split}_target",
            description=f"files {split}",
        )
    if data_config.dataset == "multi30k":
        return multi30k_corpus(
            split,
            source_lang=data_config.source_lang or "en",
            target_lang=data_config.target_lang or "de",
            data_dir=data_config.data_dir,
            cache_dir=data_config.cache_dir,
        )
    return TfdsCorpus(
        data_config.tfds_name,
        split,
        source_lang=data_config.source_lang,
        target_lang=data_config.target_lang,
        data_dir=data_config.tfds_data_dir,
        offline=data_config.tfds_offline,
        shuffle_files=training,
        seed=data_config.shuffle_seed,
    )
