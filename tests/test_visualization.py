"""tf_transformer.visualization: figure sizes, what the heatmaps show, the model's own translation, errors."""

import gzip
import os
import struct
import sys

import keras
import numpy as np
import pytest

import tf_transformer as tft
from tf_transformer import visualization
from tf_transformer.data import train_sentencepiece
from tf_transformer.decoding import DecodingSettings, greedy_decode


@pytest.fixture(scope="module")
def matplotlib_installed():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        message = "matplotlib is not installed (pip install '.[plot]'); the plotting tests need it"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI installs the test extra, which has matplotlib: a skip would hide a failure
        pytest.skip(message)


@pytest.fixture(scope="module")
def model_and_tokenizer(matplotlib_installed, multi30k_dir, tmp_path_factory):
    # Seed first: tf.random.set_seed clears TensorFlow's kernel cache, dropping SentencePiece tokenizers made before.
    keras.utils.set_random_seed(0)
    lines = []
    for lang in ("en", "de"):
        with gzip.open(multi30k_dir / f"train.{lang}.gz", "rt", encoding="utf-8") as handle:
            lines += [next(handle).strip() for _ in range(100)]
    tokenizer = train_sentencepiece(lines, tmp_path_factory.mktemp("vocab"), vocab_size=400, seed=0)
    config = tft.TransformerConfig(
        vocab_size=tokenizer.vocab_size, d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1,
        num_decoder_layers=1, max_length=24, dropout=0.0, position_encoding="learned",
    )  # fmt: skip
    model = tft.Transformer(config)
    model.build()
    return model, tokenizer


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_attention_figures_have_one_panel_per_head_and_the_documented_size(matplotlib_installed, tmp_path):
    weights = np.random.default_rng(0).dirichlet(np.ones(5), size=(5, 16))  # 5 heads, 16 queries, 5 keys
    queries, keys = [f"q{i}" for i in range(16)], [f"k{i}" for i in range(5)]
    # 16 tokens * 0.25 inch = 4-inch panels (more than the 3-inch minimum); 20 dpi -> 80 pixels a panel.
    figure = visualization.plot_attention_heads(weights, queries, keys, "two heads", heads=[3, 0], dpi=20)
    assert [axis.get_title() for axis in figure.axes[:2]] == ["head 3", "head 0"]
    np.testing.assert_array_equal(figure.axes[0].images[0].get_array(), weights[3])
    assert png_size(visualization.save_figure(figure, tmp_path / "two.png")) == (2 * 80, 80 + 10)
    figure = visualization.plot_attention_heads(weights, queries, keys, "all heads", dpi=20)
    # Five heads: a row of four, then one more row; the half-inch title band adds 10 pixels.
    assert png_size(visualization.save_figure(figure, tmp_path / "all.png")) == (4 * 80, 2 * 80 + 10)
    short = visualization.plot_attention_heads(weights[:1, :4, :3], queries[:4], keys[:3], "short", dpi=20)
    assert png_size(visualization.save_figure(short, tmp_path / "short.png")) == (60, 60 + 10)  # 3-inch minimum


def test_positional_encoding_shows_the_papers_sinusoids_or_the_learned_table(model_and_tokenizer):
    model, _ = model_and_tokenizer
    image = visualization.plot_positional_encoding(model, positions=10).axes[0].images[0].get_array()
    np.testing.assert_array_equal(image, model.source_position.position_embeddings.numpy()[:10])

    sinusoidal = tft.Transformer(model.config.replace(position_encoding="sinusoidal"))
    image = visualization.plot_positional_encoding(sinusoidal, positions=50).axes[0].images[0].get_array()
    assert image.shape == (24, 16)  # capped at max_length
    position, dimension = np.arange(24)[:, None], np.arange(16)[None, :]
    angle = position / 10000 ** ((dimension - dimension % 2) / 16)
    np.testing.assert_allclose(image, np.where(dimension % 2 == 0, np.sin(angle), np.cos(angle)), atol=1e-6)


def test_sentence_attention_over_the_models_own_translation(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    sentence = "Two dogs play in the snow."
    attention = visualization.sentence_attention(
        model, tokenizer, sentence, settings=DecodingSettings(method="greedy", max_decode_length=5)
    )
    assert attention.translated
    source_ids = np.append(tokenizer.tokenize(sentence).numpy(), model.config.eos_id)[None]
    ids = greedy_decode(model, source_ids, DecodingSettings(max_decode_length=5))[0].numpy()[0]
    ids = ids[: list(ids).index(model.config.eos_id) + 1]
    pieces = tokenizer.tokens()
    assert attention.target_output_tokens == [pieces[i] for i in ids]
    assert attention.target == tokenizer.detokenize(ids).numpy().decode()
    assert attention.source_tokens[-1] == "</s>" and attention.target_input_tokens[0] == "<s>"
    assert attention.target_output_tokens[-1] == "</s>"
    assert attention.target_input_tokens[1:] == attention.target_output_tokens[:-1]
    source, target = len(attention.source_tokens), len(attention.target_output_tokens)
    assert 1 <= target <= 5
    assert attention.weights["encoder_self"][0].shape == (2, source, source)
    assert attention.weights["decoder_self"][0].shape == (2, target, target)
    assert attention.weights["decoder_cross"][0].shape == (2, target, source)

    given = visualization.sentence_attention(model, tokenizer, sentence, "Zwei Hunde.")
    assert not given.translated and given.target == "Zwei Hunde."
    assert "".join(given.target_output_tokens[:-1]).replace("\u2581", " ").strip() == "Zwei Hunde."


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(sentence="  "), "sentence: expected a non-empty sentence"),
        (dict(sentence="a " * 30), "tokens, but the model takes at most 23"),
        (dict(target=""), "target: expected a non-empty sentence"),
        (dict(layers=[1]), "layers: encoder layer index 1 is out of range"),
        (dict(heads=[0, 0]), "heads: [0, 0] repeats an index"),
        (dict(heads=[]), "heads: the list is empty"),
        (dict(dpi=0), "dpi: must be an int >= 1"),
    ],
)
def test_bad_arguments_name_the_problem(model_and_tokenizer, tmp_path, arguments, message):
    model, tokenizer = model_and_tokenizer
    arguments = {"sentence": "A dog.", "target": "Ein Hund.", **arguments}
    with pytest.raises(ValueError, match="Fix:") as error:
        visualization.write_attention_plots(model, tokenizer, output_dir=tmp_path / "plots", **arguments)
    assert message in str(error.value)
    assert not (tmp_path / "plots").exists()  # nothing written


def test_missing_matplotlib_says_how_to_install_it(monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)  # makes `import name` raise ImportError
    with pytest.raises(ImportError) as error:
        visualization.plot_attention_heads(np.ones((1, 1, 1)), ["a"], ["b"], "title")
    assert isinstance(error.value, visualization.MatplotlibMissingError)
    assert str(error.value) == "matplotlib is not installed. Fix: pip install 'tf-transformer[plot]'"
