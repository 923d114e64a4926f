"""tf.data input pipelines: parallel text, Multi30k and TFDS corpora; subword vocabularies; token batching.

from tf_transformer.data import DataConfig, build_vocabulary, make_dataset, scan_lengths

data_config = DataConfig(dataset="multi30k", data_dir="../shared/data/multi30k", source_lang="en", target_lang="de")
tokenizer = build_vocabulary(data_config, "vocab/")           # or Tokenizer.from_directory("vocab/")
print(scan_lengths(data_config, tokenizer, "train").summary())
train = make_dataset(data_config, tokenizer, "train")           # ((source, target_in), target_out), repeated
"""

from tf_transformer._lazy import lazy_attributes

# Imported on first use (PEP 562; see tf_transformer/_lazy.py): public name -> its module.
_LAZY = {
    "batch_by_tokens": "tf_transformer.data.batching",
    "bucket_batch_sizes": "tf_transformer.data.batching",
    "bucket_boundaries": "tf_transformer.data.batching",
    "build_vocabulary": "tf_transformer.data.vocab",
    "check_special_ids": "tf_transformer.data.tokenizer",
    "DataConfig": "tf_transformer.data.config",
    "DataError": "tf_transformer.data.errors",
    "DataReport": "tf_transformer.data.pipeline",
    "download_file": "tf_transformer.data.multi30k",
    "download_multi30k": "tf_transformer.data.multi30k",
    "encode_batch": "tf_transformer.data.pipeline",
    "FileCorpus": "tf_transformer.data.files",
    "inspect_text_file": "tf_transformer.data.text_files",
    "make_dataset": "tf_transformer.data.pipeline",
    "multi30k_corpus": "tf_transformer.data.multi30k",
    "open_corpus": "tf_transformer.data.sources",
    "padding_fraction": "tf_transformer.data.batching",
    "ParallelCorpus": "tf_transformer.data.corpus",
    "sample_sentences": "tf_transformer.data.vocab",
    "scan_lengths": "tf_transformer.data.pipeline",
    "simulate_batches": "tf_transformer.data.batching",
    "synthetic_pairs": "tf_transformer.data.synthetic",
    "SYNTHETIC_TASKS": "tf_transformer.data.synthetic",
    "synthetic_translation_dataset": "tf_transformer.data.synthetic",
    "Tokenizer": "tf_transformer.data.tokenizer",
    "train_sentencepiece": "tf_transformer.data.vocab",
    "train_wordpiece": "tf_transformer.data.vocab",
}
__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)

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
