"""Pictures of a trained Transformer: attention heatmaps per layer and head, and the positional encoding
(`write_attention_plots` writes them all).

matplotlib is an optional dependency (`pip install 'tf-transformer[plot]'`), imported only when a figure is
drawn; without it a `MatplotlibMissingError` (an ImportError) says how to install it. Figures are
`matplotlib.figure.Figure` objects on the Agg canvas, never pyplot: nothing opens a window, and the
caller's pyplot backend and state are left alone.

Axes show the tokenizer's subword pieces. Encoder self-attention: source pieces + `</s>` on both axes.
Decoder self-attention: keys are the decoder inputs (`<s>` + target pieces); row i is the position that
predicts target output i (target pieces + `</s>`), so the rows are labelled with the predicted piece.
Encoder-decoder attention: the same rows, the source pieces as keys.

Attention figure size: one square panel per head, at most `MAX_COLUMNS` panels a row; a panel is
`max(MIN_PANEL_INCHES, PANEL_INCHES_PER_TOKEN * longest axis in tokens)` inches wide and high, and the
title band adds `TITLE_INCHES` to the height. Pixels = inches * dpi.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
import pathlib
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from tf_transformer.decoding import translate
from tf_transformer.decoding.settings import PAPER, DecodingSettings, require_settings
from tf_transformer.files import write_atomically
from tf_transformer.layers.position import sinusoidal_table

ATTENTION_KINDS = ("encoder_self", "decoder_self", "decoder_cross")
TITLES = {
    "encoder_self": "Encoder self-attention",
    "decoder_self": "Decoder self-attention",
    "decoder_cross": "Encoder-decoder attention",
}
POSITIONAL_ENCODING_FILE = "positional_encoding.png"
MAX_COLUMNS = 4
MIN_PANEL_INCHES = 3.0
# A power-of-two fraction, so sizes in inches (and pixels) are exact.
PANEL_INCHES_PER_TOKEN = 0.25
TITLE_INCHES = 0.5
POSITION_FIGURE_INCHES = (8.0, 5.0)

PathLike = Union[str, os.PathLike]


class MatplotlibMissingError(ImportError):
    """Plotting needs matplotlib, an optional dependency."""


def _figure_class():
    """`Figure` bound to the Agg canvas, or a MatplotlibMissingError naming the fix."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise MatplotlibMissingError("matplotlib is not installed. Fix: pip install 'tf-transformer[plot]'") from error

    def new_figure(**kwargs):
        figure = Figure(**kwargs)
        FigureCanvasAgg(figure)
        return figure

    return new_figure


@dataclasses.dataclass(frozen=True)
class SentenceAttention:
    """The attention weights of one sentence pair, with the pieces that label them.

    Attributes:
        sentence: the source sentence.
        target: the target sentence: the one given, or the model's own translation.
        translated: whether `target` is the model's translation.
        source_tokens: source pieces + the end-of-sequence token (the encoder's positions).
        target_input_tokens: `<s>` + target pieces (the decoder's inputs: its self-attention keys).
        target_output_tokens: target pieces + `</s>` (what each decoder position predicts).
        weights: for each of `ATTENTION_KINDS`, one float32 array `[num_heads, queries, keys]` per layer.
    """

    sentence: str
    target: str
    translated: bool
    source_tokens: List[str]
    target_input_tokens: List[str]
    target_output_tokens: List[str]
    weights: Dict[str, List[np.ndarray]]


def sentence_attention(
    model,
    tokenizer,
    sentence: str,
    target: Optional[str] = None,
    settings: DecodingSettings = PAPER,
) -> SentenceAttention:
    """Every attention weight of `model` on `sentence`, teacher-forced with `target` or with its own translation.

    The source is tokenized as in training (pieces + EOS). Without `target` the model translates the
    sentence with `tf_transformer.decoding.translate` and `settings` (a `DecodingSettings`; default the paper's)
    and the weights are those of its best hypothesis.

    Raises:
        ValueError: an empty sentence or target, or one longer than the model's max_length.
    """
    config = model.config
    source_ids = _token_ids(tokenizer, sentence, "sentence", config.max_length)
    source_ids = np.append(source_ids, config.eos_id).astype(np.int32)
    if target is None:
        result = translate(model, source_ids[np.newaxis], require_settings(settings))
        hypothesis = result.ids.numpy()[0, 0]
        ends = np.flatnonzero(hypothesis == config.eos_id)
        target_ids = hypothesis[: ends[0] if ends.size else len(hypothesis)].astype(np.int32)
        target_text = tokenizer.detokenize(target_ids).numpy().decode("utf-8", errors="replace")
    else:
        target_ids = _token_ids(tokenizer, target, "target", config.max_length)
        target_text = target
    target_input = np.concatenate([[config.bos_id], target_ids]).astype(np.int32)
    weights = model.attention_weights(source_ids[np.newaxis], target_input[np.newaxis])
    pieces = tokenizer.tokens()
    return SentenceAttention(
        sentence=sentence,
        target=target_text,
        translated=target is None,
        source_tokens=[pieces[i] for i in source_ids],
        target_input_tokens=[pieces[i] for i in target_input],
        target_output_tokens=[pieces[i] for i in np.append(target_ids, config.eos_id)],
        weights={kind: [layer.numpy()[0] for layer in weights[kind]] for kind in ATTENTION_KINDS},
    )


def plot_attention_heads(
    weights: np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    title: str,
    heads: Optional[Sequence[int]] = None,
    *,
    query_label: str = "query",
    key_label: str = "key",
    dpi: int = 100,
):
    """A grid of heatmaps, one per head, of one layer's weights `[num_heads, queries, keys]`.

    Colours run from 0 to 1 in every panel, so heads compare at a glance. `heads` picks and orders the heads
    to show (default: all). The size follows the module's rule (panels of at least `MIN_PANEL_INCHES`).

    Returns:
        A `matplotlib.figure.Figure` (Agg canvas); save it with `figure.savefig` or `save_figure`.

    Raises:
        ValueError: `weights` does not match the tokens, or a bad head index.
    """
    weights = np.asarray(weights)
    if weights.ndim != 3 or weights.shape[1:] != (len(query_tokens), len(key_tokens)):
        raise ValueError(
            f"weights: expected [num_heads, {len(query_tokens)} queries, {len(key_tokens)} keys] to match the "
            f"tokens, got shape {weights.shape}."
        )
    heads = _check_indexes(heads, weights.shape[0], "heads", "head")
    columns = min(len(heads), MAX_COLUMNS)
    rows = math.ceil(len(heads) / columns)
    panel = max(MIN_PANEL_INCHES, PANEL_INCHES_PER_TOKEN * max(weights.shape[1:]))
    figure = _figure_class()(figsize=(columns * panel, rows * panel + TITLE_INCHES), dpi=dpi, layout="constrained")
    figure.suptitle(title)
    axes = figure.subplots(rows, columns, squeeze=False)
    image = None
    for slot, axis in enumerate(axes.flat):
        if slot >= len(heads):
            axis.set_axis_off()
            continue
        image = axis.imshow(weights[heads[slot]], vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        axis.set_title(f"head {heads[slot]}", fontsize=9)
        axis.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=7)
        axis.set_yticks(range(len(query_tokens)), query_tokens, fontsize=7)
        axis.set_xlabel(key_label, fontsize=8)
        axis.set_ylabel(query_label, fontsize=8)
    figure.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    return figure


def plot_positional_encoding(model, positions: Optional[int] = None, *, dpi: int = 100):
    """A heatmap of the position encodings added to the source embeddings: positions x dimensions.

    Sinusoidal (the paper, section 3.5): PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...);
    learned: the encoder's trained position embeddings. The first `positions` rows are shown (default and
    most: the config's max_length; ValueError unless an int >= 1). The figure is `POSITION_FIGURE_INCHES`.
    """
    config = model.config
    positions = config.max_length if positions is None else positions
    if isinstance(positions, bool) or not isinstance(positions, (int, np.integer)) or not 1 <= positions:
        raise ValueError(f"positions: must be an int >= 1, got {positions!r}. Fix: use e.g. 100.")
    positions = min(positions, config.max_length)
    if config.position_encoding == "learned":
        if not model.built:
            model.build()
        table = model.source_position.position_embeddings.numpy()[:positions]
        title = f"Learned position embeddings (encoder), d_model={config.d_model}"
    else:
        table = sinusoidal_table(positions, config.d_model)
        title = f"Sinusoidal positional encoding, d_model={config.d_model}"
    figure = _figure_class()(figsize=POSITION_FIGURE_INCHES, dpi=dpi, layout="constrained")
    axis = figure.subplots()
    limit = float(np.abs(table).max()) or 1.0
    image = axis.imshow(table, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
    axis.set_title(title)
    axis.set_xlabel("dimension")
    axis.set_ylabel("position")
    figure.colorbar(image, ax=axis, label="value")
    return figure


def save_figure(figure, path: PathLike) -> pathlib.Path:
    """Writes `figure` as a PNG at its own dpi, atomically (no half-written file under `path`)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=figure.dpi)
    return write_atomically(path, buffer.getvalue())


def write_attention_plots(
    model,
    tokenizer,
    sentence: str,
    output_dir: PathLike,
    target: Optional[str] = None,
    settings: DecodingSettings = PAPER,
    *,
    layers: Optional[Sequence[int]] = None,
    heads: Optional[Sequence[int]] = None,
    positions: Optional[int] = None,
    dpi: int = 100,
) -> dict:
    """Writes attention heatmaps of `sentence` and the positional-encoding heatmap into `output_dir`.

    Files: `encoder_self_layer{i}.png`, `decoder_self_layer{i}.png` and `decoder_cross_layer{i}.png` for
    each layer i in `layers` (default: every layer of the stack; an index must exist in both stacks), each
    a grid of `heads` (default: all), and `positional_encoding.png`. See `sentence_attention` for `target`
    and `settings`, `plot_positional_encoding` for `positions`.

    Returns:
        A JSON-ready dict: sentence, target, translated, source_tokens, target_input_tokens,
        target_output_tokens, files (the paths written, in order).

    Raises:
        MatplotlibMissingError: matplotlib is not installed (checked before any work).
        ValueError: a bad sentence, target, layer or head index, or dpi.

    Example:
        model, tokenizer, _ = tf_transformer.checkpoints.load_translation_model("runs/multi30k_tiny")
        summary = write_attention_plots(model, tokenizer, "A dog runs.", "plots/")   # PNGs + what they show
    """
    _figure_class()
    if isinstance(dpi, bool) or not isinstance(dpi, (int, np.integer)) or dpi < 1:
        raise ValueError(f"dpi: must be an int >= 1, got {dpi!r}. Fix: use e.g. 100.")
    config = model.config
    layer_counts = {"encoder": config.num_encoder_layers, "decoder": config.num_decoder_layers}
    if layers is not None:
        for stack, count in layer_counts.items():
            _check_indexes(layers, count, "layers", f"{stack} layer")
    _check_indexes(heads, config.num_heads, "heads", "head")
    attention = sentence_attention(model, tokenizer, sentence, target, require_settings(settings))
    output_dir = pathlib.Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    axes = {
        "encoder_self": (attention.source_tokens, attention.source_tokens, "source", "source"),
        "decoder_self": (attention.target_output_tokens, attention.target_input_tokens, "predicting", "target input"),
        "decoder_cross": (attention.target_output_tokens, attention.source_tokens, "predicting", "source"),
    }
    files = []
    for kind in ATTENTION_KINDS:
        queries, keys, query_label, key_label = axes[kind]
        count = layer_counts["encoder" if kind == "encoder_self" else "decoder"]
        for layer in range(count) if layers is None else layers:
            figure = plot_attention_heads(
                attention.weights[kind][layer],
                queries,
                keys,
                f"{TITLES[kind]}, layer {layer}",
                heads,
                query_label=query_label,
                key_label=key_label,
                dpi=dpi,
            )
            files.append(str(save_figure(figure, output_dir / f"{kind}_layer{layer}.png")))
    figure = plot_positional_encoding(model, positions, dpi=dpi)
    files.append(str(save_figure(figure, output_dir / POSITIONAL_ENCODING_FILE)))
    return {
        "sentence": attention.sentence,
        "target": attention.target,
        "translated": attention.translated,
        "source_tokens": attention.source_tokens,
        "target_input_tokens": attention.target_input_tokens,
        "target_output_tokens": attention.target_output_tokens,
        "files": files,
    }


def _token_ids(tokenizer, text, name: str, max_length: int) -> np.ndarray:
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{name}: expected a non-empty sentence, got {text!r}. Fix: pass the text to plot.")
    ids = tokenizer.tokenize(tf.constant(text)).numpy()
    if len(ids) + 1 > max_length:  # + the EOS (source) or the BOS (target)
        raise ValueError(
            f"{name}: {len(ids)} tokens, but the model takes at most {max_length - 1} (max_length {max_length}, "
            "less the EOS). Fix: pass a shorter sentence."
        )
    return ids


def _check_indexes(indexes, count: int, name: str, what: str) -> List[int]:
    """`indexes` (None: all of range(count)) as a list, or a ValueError naming the valid range."""
    if indexes is None:
        return list(range(count))
    indexes = list(indexes)
    if not indexes:
        raise ValueError(f"{name}: the list is empty. Fix: leave it out for all, or give indexes 0..{count - 1}.")
    for index in indexes:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < count:
            raise ValueError(
                f"{name}: {what} index {index!r} is out of range: the model has {count} ({what} 0..{count - 1}). "
                f"Fix: give indexes 0..{count - 1}."
            )
    if len(set(indexes)) != len(indexes):
        raise ValueError(f"{name}: {indexes} repeats an index. Fix: give each index once.")
    return indexes
