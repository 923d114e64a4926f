"""Multi30k: a local copy reads the known line counts; the downloader caches once, atomically, and verifies."""

import gzip
import io

import pytest

from tf_transformer.data import DataConfig, DataError, download_file, download_multi30k, open_corpus
from tf_transformer.data.multi30k import MULTI30K_LINES, multi30k_corpus


@pytest.mark.parametrize("split", ["train", "valid", "test"])
@pytest.mark.parametrize("target_lang", ["de", "fr"])
def test_data_dir_gives_the_known_line_counts(multi30k_dir, split, target_lang):
    config = DataConfig(dataset="multi30k", data_dir=str(multi30k_dir), source_lang="en", target_lang=target_lang)
    corpus = open_corpus(config, split)
    assert corpus.num_lines == MULTI30K_LINES[split]
    assert corpus.description == f"multi30k en-{target_lang} {split}"


def test_first_validation_pair(multi30k_dir):
    pairs = multi30k_corpus("valid", "en", "de", data_dir=multi30k_dir).pairs()
    assert next(pairs) == (
        "A group of men are loading cotton onto a truck",
        "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen",
    )


def test_missing_file_in_data_dir_names_the_flag(tmp_path):
    with pytest.raises(DataError) as raised:
        multi30k_corpus("valid", "en", "de", data_dir=tmp_path)
    message = str(raised.value)
    assert str(tmp_path / "val.en.gz") in message and "Fix: set --data_dir" in message


class FakeOpener:
    """Serves fixed bytes for any URL and counts the requests."""

    def __init__(self, payload: bytes):
        self.payload, self.urls = payload, []

    def __call__(self, url):
        self.urls.append(url)
        return io.BytesIO(self.payload)


def gzip_lines(count):
    return gzip.compress("".join(f"line {i}\n" for i in range(count)).encode())


def test_download_caches_once_and_renames_atomically(tmp_path):
    opener = FakeOpener(gzip_lines(1014))
    destination = tmp_path / "cache" / "val.de.gz"
    assert download_file("https://example.org/val.de.gz", destination, 1014, opener=opener) == destination
    assert download_file("https://example.org/val.de.gz", destination, 1014, opener=opener) == destination
    assert opener.urls == ["https://example.org/val.de.gz"]  # the second call used the cache
    assert destination.read_bytes() == opener.payload
    assert [p.name for p in destination.parent.iterdir()] == ["val.de.gz"]  # no temporary left


@pytest.mark.parametrize(
    "payload, reason",
    [(b"<html>404: Not Found</html>", "not a readable gzip file"), (gzip_lines(10), "has 10 lines, expected 1014")],
    ids=["html", "short"],  # gzip bytes hold a timestamp: pytest-xdist's workers must collect the same ids
)
def test_a_corrupt_download_is_rejected_and_leaves_nothing(tmp_path, payload, reason):
    destination = tmp_path / "val.de.gz"
    with pytest.raises(DataError) as raised:
        download_file("https://example.org/val.de.gz", destination, 1014, opener=FakeOpener(payload))
    assert reason in str(raised.value) and "https://example.org/val.de.gz" in str(raised.value)
    assert "--data_dir" in str(raised.value)
    assert list(tmp_path.iterdir()) == []  # neither the file nor a temporary


def test_a_failed_connection_is_a_clear_error(tmp_path):
    def refuse(url):
        raise OSError("Network is unreachable")

    with pytest.raises(DataError, match="cannot download https://example.org/x.gz .*Network is unreachable"):
        download_file("https://example.org/x.gz", tmp_path / "x.gz", opener=refuse)
    assert list(tmp_path.iterdir()) == []


def test_download_multi30k_from_a_file_url_mirror(multi30k_dir, tmp_path):
    # The default opener (urllib) on file:// URLs: the real download code path, without network.
    template = multi30k_dir.resolve().as_uri() + "/{name}.{lang}.gz"
    folder = download_multi30k(tmp_path, ("en", "de"), ("valid", "test"), url_template=template)
    assert folder == tmp_path / "multi30k"
    assert sorted(p.name for p in folder.iterdir()) == [
        "test_2016_flickr.de.gz",
        "test_2016_flickr.en.gz",
        "val.de.gz",
        "val.en.gz",
    ]
    assert (folder / "val.de.gz").read_bytes() == (multi30k_dir / "val.de.gz").read_bytes()


def test_multi30k_without_data_dir_reads_the_cache(multi30k_dir, tmp_path):
    opener_calls = []

    def opener(url):
        opener_calls.append(url)
        name = url.rsplit("/", 1)[1]
        return open(multi30k_dir / name, "rb")

    for _ in range(2):
        corpus = multi30k_corpus("test", "en", "fr", cache_dir=tmp_path, opener=opener)
        assert corpus.num_lines == 1000
    assert len(opener_calls) == 2  # en and fr, downloaded once
    assert opener_calls[0].startswith("https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/")


def write_gzip_lines(path, lang, count):
    path.write_bytes(gzip.compress("".join(f"{lang} sentence {i}\n" for i in range(count)).encode()))


@pytest.fixture
def mirror_2017(tmp_path):
    """A fake upstream folder with the 2017 test sets (en, de) at their known line counts."""
    folder = tmp_path / "mirror"
    folder.mkdir()
    for name, count in (("test_2017_flickr", 1000), ("test_2017_mscoco", 461)):
        for lang in ("en", "de"):
            write_gzip_lines(folder / f"{name}.{lang}.gz", lang, count)
    return folder


def test_download_multi30k_fetches_the_2017_test_sets(mirror_2017, tmp_path):
    template = mirror_2017.as_uri() + "/{name}.{lang}.gz"
    splits = ("test_2017_flickr", "test_2017_mscoco")
    folder = download_multi30k(tmp_path / "cache", ("en", "de"), splits, url_template=template)
    assert folder == tmp_path / "cache" / "multi30k"
    names = ["test_2017_flickr.de.gz", "test_2017_flickr.en.gz", "test_2017_mscoco.de.gz", "test_2017_mscoco.en.gz"]
    assert sorted(p.name for p in folder.iterdir()) == names
    for name in names:
        assert (folder / name).read_bytes() == (mirror_2017 / name).read_bytes()
    assert (MULTI30K_LINES["test_2017_flickr"], MULTI30K_LINES["test_2017_mscoco"]) == (1000, 461)


def test_multi30k_corpus_reads_the_2017_mscoco_test_set(mirror_2017):
    corpus = multi30k_corpus("test_2017_mscoco", "en", "de", data_dir=mirror_2017)
    pairs = list(corpus.pairs())
    assert corpus.num_lines == len(pairs) == 461
    assert pairs[0] == ("en sentence 0", "de sentence 0") and pairs[-1] == ("en sentence 460", "de sentence 460")
    assert corpus.description == "multi30k en-de test_2017_mscoco"


def test_a_2017_mirror_file_with_the_wrong_line_count_is_refused(mirror_2017, tmp_path):
    write_gzip_lines(mirror_2017 / "test_2017_mscoco.de.gz", "de", 460)
    template = mirror_2017.as_uri() + "/{name}.{lang}.gz"
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match="test_2017_mscoco.de.gz has 460 lines, expected 461"):
        download_multi30k(cache, ("en", "de"), ("test_2017_mscoco",), url_template=template)
    assert [p.name for p in (cache / "multi30k").iterdir()] == ["test_2017_mscoco.en.gz"]  # de: nothing left


def test_open_corpus_still_knows_only_the_training_splits():
    config = DataConfig(dataset="multi30k", data_dir="unused", source_lang="en", target_lang="de")
    with pytest.raises(DataError, match="unknown split 'test_2017_mscoco'"):
        open_corpus(config, "test_2017_mscoco")
