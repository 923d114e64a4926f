"""Vocabularies: special ids, text round trips, in-graph use (tf.function, tf.data, SavedModel), WordPiece."""

import gzip
import json
import os
import pathlib
import subprocess
import sys
import unicodedata

import pytest
import tensorflow as tf

from tf_transformer.config import TransformerConfig
from tf_transformer.data import DataConfig, DataError, Tokenizer, build_vocabulary, sample_sentences
from tf_transformer.data.config import vocabulary_lowercases
from tf_transformer.data.vocab import WORDPIECE_SPECIAL_TOKENS

ROOT = pathlib.Path(__file__).resolve().parents[2]


def read_gzip_lines(path, limit=None):
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()[:limit]


def nmt_nfkc(text):
    """What SentencePiece's "nmt_nfkc" rule does to Multi30k text: NFKC, whitespace runs made one space."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


def test_special_ids_match_the_transformer_config(tokenizer, spm_dir):
    config = TransformerConfig()
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) == (config.pad_id, config.bos_id, config.eos_id)
    assert tokenizer.tokens()[:4] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert tokenizer.kind == "sentencepiece" and tokenizer.vocab_size == 1000
    assert sorted(p.name for p in spm_dir.iterdir()) == ["spm.model", "spm.vocab", "tokenizer.json"]
    meta = json.loads((spm_dir / "tokenizer.json").read_text())
    assert meta["type"] == "sentencepiece" and meta["vocab_size"] == 1000
    assert len((spm_dir / "spm.vocab").read_text().splitlines()) == 1000


@pytest.mark.parametrize("lang, changed_by_normalisation", [("en", 0), ("de", 1)])
def test_round_trip_on_500_validation_sentences(tokenizer, multi30k_dir, lang, changed_by_normalisation):
    sentences = read_gzip_lines(multi30k_dir / f"val.{lang}.gz", 500)
    ids = tokenizer.tokenize(sentences)
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    assert int(tf.reduce_min(ids.flat_values)) > tokenizer.unk_id  # no special and no unknown ids in text
    back = [text.decode("utf-8") for text in tokenizer.detokenize(ids).numpy()]
    assert back == [nmt_nfkc(sentence) for sentence in sentences]
    # Exact except where normalisation changes the text: one German line has a no-break space (U+00A0).
    assert sum(a != b for a, b in zip(back, sentences, strict=True)) == changed_by_normalisation


def test_unseen_characters_round_trip_through_byte_fallback(tokenizer):
    text = "Ein Ω-förmiger Drache 🐉 über Zürich"
    ids = tokenizer.tokenize(text)
    assert ids.shape.rank == 1 and tokenizer.unk_id not in ids.numpy().tolist()
    assert tokenizer.detokenize(ids).numpy().decode() == text


def test_detokenize_drops_padding_and_bos_and_stops_at_eos(tokenizer):
    ids = tokenizer.tokenize(["A dog runs.", "Two men"]).to_list()
    rows = [[1] + ids[0] + [2, 0, 0], [1] + ids[1] + [2] + ids[0][:2]]  # junk after EOS is ignored
    width = max(map(len, rows))
    padded = tf.constant([row + [0] * (width - len(row)) for row in rows])
    assert tokenizer.detokenize(padded).numpy().tolist() == [b"A dog runs.", b"Two men"]
    assert tokenizer.detokenize(tf.ragged.constant(rows)).numpy().tolist() == [b"A dog runs.", b"Two men"]


def test_runs_inside_tf_function_and_tf_data(tokenizer):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(strings):
        return tokenizer.detokenize(tokenizer.tokenize(strings).to_tensor())

    assert round_trip(tf.constant(["A dog runs."])).numpy().tolist() == [b"A dog runs."]
    dataset = tf.data.Dataset.from_tensor_slices(["A dog.", "Ein Hund."]).map(tokenizer.tokenize)
    assert [ids.tolist() for ids in dataset.as_numpy_iterator()] == tokenizer.tokenize(
        ["A dog.", "Ein Hund."]
    ).to_list()


def test_seeding_after_a_tokenizer_exists_leaves_it_working(tokenizer, spm_dir, multi30k_dir, tmp_path):
    """tf.random.set_seed clears TensorFlow's kernel cache; tf-text's resource alone would go with it."""
    import keras

    from tf_transformer.data import train_sentencepiece

    train_sentencepiece(read_gzip_lines(multi30k_dir / "train.de.gz", 500), tmp_path / "other", vocab_size=400, seed=0)
    other = Tokenizer.from_directory(tmp_path / "other")
    sentence = "Zwei Hunde spielen im Schnee."
    dataset = tf.data.Dataset.from_tensor_slices([sentence]).map(tokenizer.tokenize)
    keras.utils.set_random_seed(7)
    tf.random.set_seed(8)
    # Both still work, and two models in one process keep their own resources: each gives its own pieces.
    expected, other_expected = reference_ids(spm_dir, sentence), reference_ids(tmp_path / "other", sentence)
    assert expected != other_expected
    assert tokenizer.tokenize([sentence]).to_list() == [expected]
    assert other.tokenize([sentence]).to_list() == [other_expected]
    assert [ids.tolist() for ids in dataset.as_numpy_iterator()] == [expected]


def reference_ids(folder, sentence):
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=str(next(pathlib.Path(folder).glob("*.model"))))
    return processor.encode(sentence)


def test_saved_model_with_the_tokenizer_inside(tokenizer, tmp_path):
    module = tf.Module()
    module.tokenizer = tokenizer
    module.round_trip = tf.function(
        lambda strings: tokenizer.detokenize(tokenizer.tokenize(strings)),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    tf.saved_model.save(module, str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    assert loaded.round_trip(tf.constant(["Zwei Hunde spielen."])).numpy().tolist() == [b"Zwei Hunde spielen."]


def test_from_directory_without_a_vocabulary_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="no vocabulary .*Fix: build one with tft-build-vocab"):
        Tokenizer.from_directory(tmp_path)


def test_sample_sentences_caps_pairs_and_keeps_both_sides():
    pairs = [(f"s{i}", f"t{i}") for i in range(100)]
    sample = sample_sentences(pairs, 20, seed=1)
    assert len(sample) == 20
    sources, targets = sample[:10], sample[10:]
    assert [s[1:] for s in sources] == [t[1:] for t in targets]  # aligned halves, corpus order
    assert sample == sample_sentences(pairs, 20, seed=1) != sample_sentences(pairs, 20, seed=2)
    assert len(sample_sentences(pairs[:3], 20)) == 6


def test_build_vocabulary_from_files_and_reload(tmp_path, multi30k_dir):
    source = tmp_path / "train.en"
    target = tmp_path / "train.de"
    source.write_text("\n".join(read_gzip_lines(multi30k_dir / "train.en.gz", 1000)) + "\n")
    target.write_text("\n".join(read_gzip_lines(multi30k_dir / "train.de.gz", 1000)) + "\n")
    config = DataConfig(
        dataset="files", train_source=str(source), train_target=str(target), vocab_size=500, spm_model_type="bpe"
    )
    built = build_vocabulary(config, tmp_path / "vocab")
    loaded = Tokenizer.from_directory(tmp_path / "vocab")
    assert built.vocab_size == loaded.vocab_size == 500
    text = ["Ein Mann fährt Fahrrad.", "A man rides a bike."]
    assert loaded.tokenize(text).to_list() == built.tokenize(text).to_list()
    assert json.loads((tmp_path / "vocab" / "tokenizer.json").read_text())["model_type"] == "bpe"


def test_a_lowercase_vocabulary_case_folds_what_it_reads_also_inside_a_saved_model(tmp_path, multi30k_dir):
    source, target = tmp_path / "train.en", tmp_path / "train.de"
    source.write_text("\n".join(read_gzip_lines(multi30k_dir / "train.en.gz", 1000)) + "\n")
    target.write_text("\n".join(read_gzip_lines(multi30k_dir / "train.de.gz", 1000)) + "\n")
    config = DataConfig(
        dataset="files", train_source=str(source), train_target=str(target), vocab_size=500, lowercase=True
    )
    built = build_vocabulary(config, tmp_path / "vocab")
    record = json.loads((tmp_path / "vocab" / "tokenizer.json").read_text())
    assert record["normalization"] == "nmt_nfkc_cf" and vocabulary_lowercases(record)
    # No upper-case letter survives into a piece (byte-fallback pieces "<0xC3>" aside): it learned folded text.
    pieces = [piece for piece in built.tokens()[4:] if not piece.startswith("<0x")]
    assert len(pieces) > 200 and not any(character.isupper() for piece in pieces for character in piece)
    mixed, lower = ["Ein MANN fährt Über die Straße.", "A Dog."], ["ein mann fährt über die straße.", "a dog."]
    assert built.tokenize(mixed).to_list() == built.tokenize(lower).to_list()
    assert [t.decode() for t in built.detokenize(built.tokenize(mixed)).numpy()] == lower
    # The folding is part of the SentencePiece model, so a SavedModel holding the tokenizer does it too.
    module = tf.Module()
    module.tokenizer = Tokenizer.from_directory(tmp_path / "vocab")
    module.round_trip = tf.function(
        lambda text: module.tokenizer.detokenize(module.tokenizer.tokenize(text)),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    tf.saved_model.save(module, str(tmp_path / "saved"))
    reloaded = tf.saved_model.load(str(tmp_path / "saved"))
    assert [t.decode() for t in reloaded.round_trip(tf.constant(mixed)).numpy()] == lower
    # A cased vocabulary from the same text keeps case.
    cased = build_vocabulary(config.replace(lowercase=False), tmp_path / "cased")
    assert cased.tokenize(mixed).to_list() != cased.tokenize(lower).to_list()
    assert not vocabulary_lowercases(json.loads((tmp_path / "cased" / "tokenizer.json").read_text()))


def test_too_large_a_vocabulary_is_a_clear_error(tmp_path):
    from tf_transformer.data import train_sentencepiece

    with pytest.raises(DataError, match="Fix: lower --vocab_size"):
        train_sentencepiece(["a b c", "d e f"], tmp_path, vocab_size=5000)


def test_wordpiece_builds_and_round_trips_up_to_its_word_split(multi30k_dir, tmp_path):
    from tensorflow_text.python.ops.bert_tokenizer import BasicTokenizer

    corpus_lines = read_gzip_lines(multi30k_dir / "train.en.gz", 250) + read_gzip_lines(
        multi30k_dir / "train.de.gz", 250
    )
    source, target = tmp_path / "s.txt", tmp_path / "t.txt"
    source.write_text("\n".join(corpus_lines[:250]) + "\n")
    target.write_text("\n".join(corpus_lines[250:]) + "\n")
    config = DataConfig(
        dataset="files", train_source=str(source), train_target=str(target), vocab_type="wordpiece", vocab_size=300
    )
    tokenizer = build_vocabulary(config, tmp_path / "wp", learn_params={"num_iterations": 2, "lower_thresh": 2})
    assert tokenizer.kind == "wordpiece" and 100 < tokenizer.vocab_size <= 300
    assert tuple(tokenizer.tokens()[:4]) == WORDPIECE_SPECIAL_TOKENS
    reloaded = Tokenizer.from_directory(tmp_path / "wp")
    assert reloaded.kind == "wordpiece" and reloaded.vocab_size == tokenizer.vocab_size
    assert not vocabulary_lowercases(json.loads((tmp_path / "wp" / "tokenizer.json").read_text()))

    sentences = corpus_lines[:50] + corpus_lines[250:300]  # seen text: every character is in the vocabulary
    ids = reloaded.tokenize(sentences)
    assert ids.dtype == tf.int32 and int(tf.reduce_min(ids.flat_values)) > reloaded.unk_id
    back = reloaded.detokenize(ids).numpy().tolist()
    # Case and accents are kept; the text comes back split into BERT words, joined by single spaces.
    words = BasicTokenizer(lower_case=False, normalization_form="NFKC").tokenize(sentences)
    expected = tf.strings.reduce_join(words, axis=-1, separator=" ").numpy().tolist()
    assert back == expected
    assert back[0] == b"Two young , White males are outside near many bushes ."


def test_a_lowercasing_wordpiece_vocabulary_says_so_in_its_record(tmp_path):
    from tf_transformer.data import train_wordpiece

    sentences = ["A Dog runs.", "Two Men walk.", "A dog sits."] * 20
    folded = train_wordpiece(sentences, tmp_path / "wp", 100, lower_case=True, learn_params={"num_iterations": 1})
    assert folded.tokenize(["A DOG"]).to_list() == folded.tokenize(["a dog"]).to_list()
    assert vocabulary_lowercases(json.loads((tmp_path / "wp" / "tokenizer.json").read_text()))


def test_build_vocab_tool(tmp_path, multi30k_dir):
    source, target = tmp_path / "s.txt", tmp_path / "t.txt.gz"
    source.write_text("\n".join(read_gzip_lines(multi30k_dir / "val.en.gz")) + "\n")
    target.write_bytes((multi30k_dir / "val.de.gz").read_bytes())
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "build_vocab.py"),
            "--dataset=files",
            f"--train_source={source}",
            f"--train_target={target}",
            "--vocab_size=400",
            f"--output_dir={tmp_path / 'vocab'}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"400 tokens, in {tmp_path / 'vocab'}" in result.stdout
    assert Tokenizer.from_directory(tmp_path / "vocab").vocab_size == 400
    assert DataConfig.from_json(tmp_path / "vocab" / "data_config.json").train_source == str(source)

    failed = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "build_vocab.py"),
            "--dataset=files",
            f"--train_source={source}",
            f"--train_target={tmp_path / 'missing.de'}",
            f"--output_dir={tmp_path / 'v2'}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"},  # Python lists the modules it imports on stderr
    )
    assert failed.returncode == 1 and "missing.de: no such file" in failed.stderr
    lines = failed.stderr.splitlines()
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    assert "tf_transformer.cli" in imported and "tensorflow" not in imported  # refused before TensorFlow starts


def test_build_vocab_tool_follows_the_model_config_as_train_does(tmp_path, multi30k_dir):
    """The size is the --config's vocab_size (with --override), as tft-train's; the default config is tft-train's."""
    source, target = tmp_path / "s.txt.gz", tmp_path / "t.txt.gz"
    source.write_bytes((multi30k_dir / "val.en.gz").read_bytes())
    target.write_bytes((multi30k_dir / "val.de.gz").read_bytes())
    command = [
        sys.executable, str(ROOT / "tools" / "build_vocab.py"), "--dataset=files", f"--train_source={source}",
        f"--train_target={target}",
    ]  # fmt: skip
    built = subprocess.run(
        [*command, "--config=multi30k", "--override=vocab_size=500", f"--output_dir={tmp_path / 'v500'}"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    assert Tokenizer.from_directory(tmp_path / "v500").vocab_size == 500
    assert DataConfig.from_json(tmp_path / "v500" / "data_config.json").vocab_size == 500
    # Without --config: "base", tft-train's default, whose 37,000 pieces are more than 2,028 sentences give.
    default = subprocess.run([*command, f"--output_dir={tmp_path / 'base'}"], capture_output=True, text=True, cwd=ROOT)
    assert default.returncode == 1 and "could not train a 37000-token unigram model" in default.stderr


def test_a_sentencepiece_model_with_other_special_ids_is_refused(tmp_path):
    import io

    import sentencepiece

    model = io.BytesIO()
    sentences = ["a dog runs", "two dogs run", "a cat sleeps"] * 10
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model, vocab_size=20, minloglevel=2
    )  # SentencePiece's defaults: unk 0, bos 1, eos 2, no padding
    with pytest.raises(DataError, match=r"uses pad/bos/eos/unk ids \(-1, 1, 2, 0\).*Fix: train it with"):
        Tokenizer.from_sentencepiece(model.getvalue())


def test_too_small_a_vocabulary_for_the_characters_says_raise_it(tmp_path):
    from tf_transformer.data import train_sentencepiece

    with pytest.raises(DataError, match="Fix: raise --vocab_size"):
        train_sentencepiece(["abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789"] * 20, tmp_path, 12)


def test_a_sampling_tokenizer_cuts_anew_each_call_and_detokenizes_to_the_same_text(tokenizer, multi30k_dir):
    sentences = read_gzip_lines(multi30k_dir / "val.de.gz", 200)
    best = tokenizer.tokenize(sentences).to_list()
    sampling = tokenizer.sampling(nbest_size=64, alpha=0.1)
    first, second = (sampling.tokenize(sentences).to_list() for _ in range(2))
    assert sum(a != b for a, b in zip(first, best, strict=True)) > 100  # most sentences cut another way
    assert sum(a != b for a, b in zip(first, second, strict=True)) > 100  # and anew on the next call
    assert [t.decode() for t in sampling.detokenize(tf.ragged.constant(first)).numpy()] == [
        nmt_nfkc(sentence) for sentence in sentences
    ]
    assert tokenizer.tokenize(sentences).to_list() == best  # the vocabulary itself still cuts one way
    batches = tf.data.Dataset.from_tensor_slices(sentences).batch(50).map(sampling.tokenize)
    assert sum(int(batch.nrows()) for batch in batches) == 200  # also in tf.data


def test_sampling_a_wordpiece_vocabulary_is_a_clear_error():
    from tf_transformer.config import ConfigError

    wordpiece = Tokenizer.from_wordpiece(list(WORDPIECE_SPECIAL_TOKENS) + ["a", "##b"])
    with pytest.raises(ConfigError, match="^subword_nbest_size: .*SentencePiece.*Fix"):
        wordpiece.sampling(nbest_size=64, alpha=0.1)


def test_the_model_directorys_name_for_the_vocabulary_record_is_the_tokenizers():
    from tf_transformer.data.tokenizer import TOKENIZER_JSON
    from tf_transformer.model_dir import VOCAB_RECORD

    assert VOCAB_RECORD == TOKENIZER_JSON  # the TensorFlow-free readers (tft-evaluate, fine-tuning) use the first
