"""tf.data input pipelines: parallel text, Multi30k and TFDS corpora; subword vocabularies; token batching.

from tf_transformer.data import DataConfig, build_vocabulary, make_dataset, scan_lengths

data_config = DataConfig(dataset="multi30k", data_dir="../shared/data/multi30k", source_lang="en", target_lang="de")
tokenizer = build_vocabulary(data_config, "vocab/")           # or Tokenizer.from_directory("vocab/")
print(scan_lengths(data_config, tokenizer, "train").summary())
train = make_dataset(data_config, tokenizer, "train")           # ((source, target_in), target_out), repeated
"""

from tf_transformer.data.batching import (
    batch_by_tokens,
    bucket_batch_sizes,
    bucket_boundaries,
    padding_fraction,
    simulate_batches,
)
from tf_transformer.data.config import DataConfig
from tf_transformer.data.corpus import ParallelCorpus
from tf_transformer.data.errors import DataError
from tf_transformer.data.files import FileCorpus, inspect_text_file
from tf_transformer.data.multi30k import download_file, download_multi30k, multi30k_corpus
from tf_transformer.data.pipeline import DataReport, encode_batch, make_dataset, scan_lengths
from tf_transformer.data.sources import open_corpus
from tf_transformer.data.synthetic import SYNTHETIC_TASKS, synthetic_pairs, synthetic_translation_dataset
from tf_transformer.data.vocab import (
    Tokenizer,
    build_vocabulary,
    check_special_ids,
    sample_sentences,
    train_sentencepiece,
    train_wordpiece,
)

__all__ = [
    "SYNTHETIC_TASKS",
    "DataConfig",
    "DataError",
    "DataReport",
    "FileCorpus",
    "ParallelCorpus",
    "Tokenizer",
    "batch_by_tokens",
    "bucket_batch_sizes",
    "bucket_boundaries",
    "build_vocabulary",
    "check_special_ids",
    "download_file",
    "download_multi30k",
    "encode_batch",
    "inspect_text_file",
    "make_dataset",
    "multi30k_corpus",
    "open_corpus",
    "padding_fraction",
    "sample_sentences",
    "scan_lengths",
    "simulate_batches",
    "synthetic_pairs",
    "synthetic_translation_dataset",
    "train_sentencepiece",
    "train_wordpiece",
]
