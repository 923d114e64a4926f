"""Parallel text files: clear errors for bad input, gzip and plain read alike, empty pairs skipped."""

import gzip

import pytest

from tf_transformer.data import DataConfig, DataError, FileCorpus, inspect_text_file, open_corpus


def write(path, text, compress=False, encoding="utf-8"):
    data = text.encode(encoding) if isinstance(text, str) else text
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def corpus_pairs(corpus):
    tf_pairs = [(s.decode(), t.decode()) for s, t in corpus.as_dataset().as_numpy_iterator()]
    python_pairs = list(corpus.pairs())
    assert tf_pairs == python_pairs  # the tf.data and Python views agree pair for pair
    return python_pairs


def test_misaligned_files_name_both_files_both_counts_and_the_fix(tmp_path):
    source = write(tmp_path / "train.en", "a\nb\nc\n")
    target = write(tmp_path / "train.de", "x\ny\n")
    with pytest.raises(DataError) as raised:
        FileCorpus(source, target)
    message = str(raised.value)
    assert str(source) in message and str(target) in message
    assert "3 lines" in message and "has 2" in message
    assert "Fix:" in message and "aligned line for line" in message


def test_missing_file_names_the_path_and_the_flag(tmp_path):
    target = write(tmp_path / "valid.de", "x\n")
    config = DataConfig(
        dataset="files",
        train_source="t",
        train_target="t",
        valid_source=str(tmp_path / "nope.en"),
        valid_target=str(target),
    )
    with pytest.raises(DataError) as raised:
        open_corpus(config, "valid")
    message = str(raised.value)
    assert str(tmp_path / "nope.en") in message and "no such file" in message
    assert "Fix: set --valid_source to" in message


def test_split_without_files_names_the_flags():
    config = DataConfig(dataset="files", train_source="a", train_target="b")
    with pytest.raises(DataError, match="--test_source=PATH and --test_target=PATH"):
        open_corpus(config, "test")


@pytest.mark.parametrize("compress", [False, True])
def test_empty_file_is_a_clear_error(tmp_path, compress):
    empty = write(tmp_path / "empty.en", "", compress=compress)
    with pytest.raises(DataError) as raised:
        inspect_text_file(empty, "--train_source")
    assert str(empty) in str(raised.value) and "the file is empty" in str(raised.value)
    assert "Fix: set --train_source to a file with one sentence a line" in str(raised.value)


@pytest.mark.parametrize("compress", [False, True])
def test_undecodable_bytes_name_the_file_the_line_and_the_fix(tmp_path, compress):
    good = "A dog.\nZwei Männer.\n".encode()
    bad = write(tmp_path / "latin1.de", good + "Ein Mädchen.\n".encode("latin-1") + b"end\n", compress=compress)
    with pytest.raises(DataError) as raised:
        inspect_text_file(bad, "--train_target")
    message = str(raised.value)
    assert str(bad) in message and "line 3 is not valid UTF-8" in message
    assert "Fix: re-encode the file as UTF-8" in message and "--train_target" in message


def test_undecodable_bytes_far_into_a_file_get_the_right_line(tmp_path, monkeypatch):
    import tf_transformer.data.text_files as files

    monkeypatch.setattr(files, "_CHUNK_BYTES", 64)  # many chunk boundaries, some inside a line
    lines = [f"sentence number {i} é".encode() for i in range(200)]
    lines[150] = "café".encode("latin-1")
    path = write(tmp_path / "big.txt", b"\n".join(lines) + b"\n")
    with pytest.raises(DataError, match="line 151 is not valid UTF-8"):
        inspect_text_file(path)


def test_an_unchanged_file_is_read_once_and_a_changed_one_again(tmp_path, monkeypatch):
    import tf_transformer.data.text_files as files

    opened = []
    monkeypatch.setattr(files, "open_binary", lambda path, read=files.open_binary: opened.append(path) or read(path))
    path = write(tmp_path / "lines.txt", "one\ntwo\n")
    link = tmp_path / "link.txt"
    link.symlink_to(path)
    first = inspect_text_file(path)
    assert (first.path, first.num_lines) == (str(path), 2)
    assert inspect_text_file(link) == files.TextFileInfo(str(link), False, 2, False)  # the same file: not read
    assert opened == [str(path)]
    write(path, "one\ntwo\nthree\n")
    assert inspect_text_file(path).num_lines == 3 and opened == [str(path)] * 2


def test_broken_gzip_is_a_clear_error(tmp_path):
    data = gzip.compress("".join(f"sentence {i}\n" for i in range(1000)).encode())
    broken = write(tmp_path / "broken.gz", data[: len(data) // 2])
    with pytest.raises(DataError, match="cannot be read as gzip"):
        inspect_text_file(broken)


def test_gzip_and_plain_give_the_same_pairs_whatever_the_names(tmp_path):
    source = "A man.\n  Two dogs run.  \n\nA cat.\r\nLast line without newline"
    target = "Ein Mann.\nZwei Hunde rennen.\nleer\n \nKeine neue Zeile am Ende"
    plain = FileCorpus(write(tmp_path / "s.gz", source), write(tmp_path / "t.gz", target))  # plain, named .gz
    zipped = FileCorpus(
        write(tmp_path / "s.txt", source, compress=True), write(tmp_path / "t.txt", target, compress=True)
    )
    assert not plain.source.compressed and zipped.source.compressed  # told apart by magic bytes
    assert plain.num_lines == zipped.num_lines == 5
    expected = [
        ("A man.", "Ein Mann."),
        ("Two dogs run.", "Zwei Hunde rennen."),
        ("Last line without newline", "Keine neue Zeile am Ende"),
    ]
    assert corpus_pairs(plain) == corpus_pairs(zipped) == expected  # 2 pairs with an empty side skipped


def test_a_byte_order_mark_is_removed(tmp_path):
    corpus = FileCorpus(write(tmp_path / "s", "\ufeffHello\nWorld\n"), write(tmp_path / "t", "Hallo\nWelt\n"))
    assert corpus.source.has_bom
    assert corpus_pairs(corpus) == [("Hello", "Hallo"), ("World", "Welt")]
