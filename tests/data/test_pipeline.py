"""The input pipeline: batch layout, token budget, every pair once, long pairs, padding, determinism."""

import collections
import dataclasses

import pytest
import tensorflow as tf

from tf_transformer.data import (
    DataConfig,
    FileCorpus,
    ParallelCorpus,
    bucket_batch_sizes,
    bucket_boundaries,
    make_dataset,
    open_corpus,
    padding_fraction,
    scan_lengths,
    synthetic_translation_dataset,
)

BOS, EOS = 1, 2


@pytest.fixture(scope="module")
def config(multi30k_dir):
    return DataConfig(dataset="multi30k", data_dir=str(multi30k_dir), source_lang="en", target_lang="de", seed=0)


def rows(batch):
    """The unpadded (source, target_in, target_out) rows of a batch, as tuples of ids."""
    (source, target_in), target_out = batch
    for s, ti, to in zip(source.tolist(), target_in.tolist(), target_out.tolist(), strict=True):
        yield tuple(x for x in s if x), tuple(x for x in ti if x), tuple(x for x in to if x)


def expected_rows(tokenizer, corpus, max_length=None):
    pairs = list(corpus.pairs())
    sources = tokenizer.tokenize([s for s, _ in pairs]).to_list()
    targets = tokenizer.tokenize([t for _, t in pairs]).to_list()
    result = []
    for s, t in zip(sources, targets, strict=True):
        if max_length is None or (len(s) < max_length and len(t) < max_length):
            result.append((tuple(s) + (EOS,), (BOS,) + tuple(t), tuple(t) + (EOS,)))
    return result


def test_bucket_boundaries_and_batch_sizes():
    boundaries = bucket_boundaries(100)
    assert boundaries[:3] == [2, 3, 4] and boundaries[31] == 33 and boundaries[-1] == 101
    assert boundaries == sorted(set(boundaries))
    sizes = bucket_batch_sizes(boundaries, 4096)
    assert sizes[0] == 2048 and sizes[-2] == 4096 // 200 and sizes[-1] == 1
    assert bucket_boundaries(5) == [2, 3, 4, 5, 6]


def test_batch_layout_and_token_budget(config, tokenizer):
    dataset = make_dataset(config, tokenizer, "valid", training=False)
    spec = dataset.element_spec
    assert spec[0][0].dtype == spec[0][1].dtype == spec[1].dtype == tf.int32
    count = 0
    for batch in dataset.as_numpy_iterator():
        (source, target_in), target_out = batch
        assert source.shape[0] * (source.shape[1] + target_in.shape[1]) <= config.batch_tokens
        assert target_in.shape == target_out.shape
        for s, ti, to in rows(batch):
            assert s[-1] == EOS and EOS not in s[:-1]
            assert ti[0] == BOS and to[-1] == EOS and ti[1:] == to[:-1]
            count += 1
    assert count == 1014


def test_every_pair_exactly_once_per_shuffled_epoch(config, tokenizer):
    corpus = open_corpus(config, "valid")
    dataset = make_dataset(config, tokenizer, "valid", training=True, repeat=False, corpus=corpus)
    seen = collections.Counter(row for batch in dataset.as_numpy_iterator() for row in rows(batch))
    assert seen == collections.Counter(expected_rows(tokenizer, corpus))


def test_training_dataset_repeats_and_keeps_the_budget(config, tokenizer):
    dataset = make_dataset(config, tokenizer, "valid")  # 1014 pairs; 60 batches are several epochs
    total = 0
    for (source, target_in), _ in dataset.take(60).as_numpy_iterator():
        assert source.shape[0] * (source.shape[1] + target_in.shape[1]) <= config.batch_tokens
        total += source.shape[0]
    assert total > 2 * 1014


@pytest.mark.parametrize("long_pairs", ["drop", "truncate"])
def test_long_pairs_are_dropped_or_truncated_and_counted(config, tokenizer, long_pairs):
    config = config.replace(max_length=16, batch_tokens=256, long_pairs=long_pairs)
    corpus = open_corpus(config, "valid")
    report = scan_lengths(config, tokenizer, "valid", corpus=corpus)
    fitting = expected_rows(tokenizer, corpus, max_length=16)
    too_long = 1014 - len(fitting)
    assert too_long > 100  # the test is about something
    batches = list(make_dataset(config, tokenizer, "valid", training=False, corpus=corpus).as_numpy_iterator())
    produced = [row for batch in batches for row in rows(batch)]
    assert all(len(part) <= 16 for row in produced for part in row)
    assert report.pairs_read == 1014 and report.empty_skipped == 0
    assert report.longest_source > 16 or report.longest_target > 16
    if long_pairs == "drop":
        assert (report.kept, report.dropped, report.truncated) == (len(fitting), too_long, 0)
        assert collections.Counter(produced) == collections.Counter(fitting)
    else:
        assert (report.kept, report.dropped, report.truncated) == (1014, 0, too_long)
        assert len(produced) == 1014
        assert sum(len(s) == 16 and s[-1] == EOS for s, _, _ in produced) >= sum(
            len(s) >= 16 for s, _, _ in expected_rows(tokenizer, corpus)
        )


def test_padding_below_10_percent_on_multi30k(config, tokenizer):
    report = scan_lengths(config, tokenizer, "train")
    assert report.pairs_read == report.kept == 29000
    assert report.padding_fraction < 0.10, report.summary()
    assert padding_fraction(make_dataset(config, tokenizer, "train"), 50) < 0.10
    assert "29000 pairs read" in report.summary() and report.to_dict()["kept"] == 29000


def test_the_report_predicts_the_batches(config, tokenizer):
    report = scan_lengths(config, tokenizer, "valid")
    batches = list(make_dataset(config, tokenizer, "valid", training=False).as_numpy_iterator())
    assert len(batches) == report.num_batches
    in_order = make_dataset(config, tokenizer, "valid", training=False)
    assert padding_fraction(in_order) == pytest.approx(report.padding_fraction, abs=1e-12)
    real = sum(int((batch[0][0] != 0).sum() + (batch[1] != 0).sum()) for batch in batches)
    assert real == report.source_tokens + report.target_tokens


def test_empty_pairs_are_skipped_and_counted(tmp_path, tokenizer):
    source = tmp_path / "s.txt"
    target = tmp_path / "t.txt"
    source.write_text("A dog.\n\nA cat.\n   \nTwo men.\n")
    target.write_text("Ein Hund.\nleer\nEine Katze.\nleer\n\n")
    config = DataConfig(dataset="files", train_source=str(source), train_target=str(target))
    report = scan_lengths(config, tokenizer)
    assert (report.pairs_read, report.empty_skipped, report.kept) == (5, 3, 2)
    dataset = make_dataset(config, tokenizer, training=False)
    produced = sorted(row for batch in dataset.as_numpy_iterator() for row in rows(batch))
    assert produced == sorted(expected_rows(tokenizer, FileCorpus(source, target)))
    assert report.to_json(tmp_path / "report.json") == (tmp_path / "report.json").read_text()


def first_batches(config, tokenizer, count=3):
    dataset = make_dataset(config, tokenizer, "valid")
    return [(s.tolist(), ti.tolist(), to.tolist()) for (s, ti), to in dataset.take(count).as_numpy_iterator()]


def test_deterministic_mode_gives_identical_batches(config, tokenizer):
    deterministic = config.replace(deterministic=True, seed=5, shuffle_buffer=1000)
    first = first_batches(deterministic, tokenizer)
    assert first_batches(deterministic, tokenizer) == first
    assert first_batches(deterministic.replace(seed=6), tokenizer) != first
    assert config.replace(deterministic=True, seed=None).shuffle_seed == 0  # no seed: seed 0


class InMemoryCorpus(ParallelCorpus):
    def raw_dataset(self):
        return tf.data.Dataset.from_tensor_slices((["A dog. ", " "], ["Ein Hund.", "leer"]))


def test_every_dataset_the_package_iterates_runs_without_the_autotuning_thread(config, tokenizer, monkeypatch):
    # TensorFlow 2.21's autotuning thread can keep a freed iterator waiting up to 60 s (data/dataset_options.py).
    iterated = []
    as_numpy_iterator = tf.data.Dataset.as_numpy_iterator

    def recording(dataset):
        iterated.append(dataset.options().autotune.enabled)
        return as_numpy_iterator(dataset)

    monkeypatch.setattr(tf.data.Dataset, "as_numpy_iterator", recording)
    train = make_dataset(config.replace(deterministic=True), tokenizer, "train")  # reads one batch to check the data
    valid = make_dataset(config, tokenizer, "valid", training=False)
    scan_lengths(config, tokenizer, "valid")
    assert list(InMemoryCorpus().pairs()) == [("A dog.", "Ein Hund.")]  # ParallelCorpus.pairs, as TFDS corpora read
    assert iterated == [False] * 3
    for dataset, deterministic in ((train, True), (valid, True), (make_dataset(config, tokenizer), False)):
        assert not dataset.options().autotune.enabled
        assert dataset.options().deterministic is deterministic
    assert not synthetic_translation_dataset("copy", 8, 4).options().autotune.enabled


def test_a_corpus_without_usable_pairs_ends_instead_of_repeating_forever(tmp_path, tokenizer):
    (tmp_path / "s.txt").write_text("A dog.\n\n")
    (tmp_path / "t.txt").write_text("\nleer\n")
    config = DataConfig(dataset="files", train_source=str(tmp_path / "s.txt"), train_target=str(tmp_path / "t.txt"))
    assert list(make_dataset(config, tokenizer).take(1)) == []
    assert scan_lengths(config, tokenizer).kept == 0


def test_batch_multiple_rounds_every_bucket_down_to_a_multiple():
    from tf_transformer.data import bucket_batch_sizes, bucket_boundaries

    boundaries = bucket_boundaries(48)
    plain = bucket_batch_sizes(boundaries, 1024)
    even = bucket_batch_sizes(boundaries, 1024, batch_multiple=4)
    for one, rounded in zip(plain, even, strict=True):
        assert rounded % 4 == 0
        assert rounded == max(4, one // 4 * 4)


def test_the_batch_replay_fed_in_chunks_equals_a_reference_bucketing():
    import numpy as np

    from tf_transformer.data.batching import BatchReplay

    rng = np.random.default_rng(0)
    source, target = rng.integers(2, 60, 5000), rng.integers(2, 60, 5000)
    boundaries = bucket_boundaries(64)
    sizes = bucket_batch_sizes(boundaries, 1024)
    # Reference: per bucket, first come first served, a batch emitted when full, the rest at the end.
    buckets, emitted = collections.defaultdict(list), []
    for s, t in zip(source.tolist(), target.tolist(), strict=True):
        key = sum(1 for boundary in boundaries if boundary <= max(s, t))
        buckets[key].append((s, t))
        if len(buckets[key]) == sizes[key]:
            emitted.append(buckets.pop(key))
    emitted.extend(buckets.values())
    batches = len(emitted)
    positions = sum(len(members) * (max(m[0] for m in members) + max(m[1] for m in members)) for members in emitted)
    replay = BatchReplay(1024, boundaries)
    for start in range(0, 5000, 777):  # chunks that cut batches in the middle
        replay.add(source[start : start + 777], target[start : start + 777])
    assert replay.finish() == (batches, positions, int(source.sum() + target.sum()))


@pytest.mark.parametrize("long_pairs", ["drop", "truncate"])
def test_the_pipeline_traces_without_autograph_conversions(config, tokenizer, long_pairs, monkeypatch):
    # Its map functions branch on Python values only: autograph's parsing and rewriting of them is left out
    # (~1.5 s of every new process's train()). The hook is autograph's private conversion entry point.
    from tensorflow.python.autograph.impl import api

    converted = []
    convert = api._convert_actual
    monkeypatch.setattr(
        api, "_convert_actual", lambda entity, context: converted.append(entity) or convert(entity, context)
    )
    config = dataclasses.replace(config, long_pairs=long_pairs)
    scan_lengths(config, tokenizer, "valid")
    next(iter(make_dataset(config, tokenizer, "train", training=True)))
    next(iter(make_dataset(config, tokenizer, "valid", training=False)))
    assert converted == []
