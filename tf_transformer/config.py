"""`TransformerConfig`: the one object every model, pipeline, checkpoint and export is built from."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import pathlib
from importlib import resources
from typing import Any, Mapping, Optional, Sequence, Union

from tf_transformer.decoding.settings import COMMAND_DEFAULTS, check_settings
from tf_transformer.files import write_atomically

POSITION_ENCODINGS = ("sinusoidal", "learned")
# The fields of decoding.json (decoding.settings.CONFIG_FIELDS), not of the model.
DECODE_FIELDS = (
    "decode_beam_size", "decode_length_penalty", "decode_method", "decode_average_last", "decode_no_repeat_ngram_size",
    "decode_max_decode_length",
)  # fmt: skip
ACTIVATIONS = ("relu", "gelu")


class ConfigError(ValueError):
    """A `TransformerConfig` field is invalid; the message names the field and the fix."""


class JsonConfig:
    """JSON in and out for the frozen config dataclasses (model, data, training run).

    `from_dict` refuses unknown keys, suggesting the nearest field; `replace` and `with_overrides` build a
    new config, validated again by the dataclass's `__post_init__`.
    """

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]):
        """Builds a config from a mapping; unknown keys are an error that suggests the nearest field."""
        if not isinstance(values, Mapping):
            raise ConfigError(f"a {cls.__name__} must be a JSON object (field -> value), got {type(values).__name__}.")
        known = [field.name for field in dataclasses.fields(cls)]
        for key in values:
            if key not in known:
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"{key}: not a {cls.__name__} field.{hint} Fix: use one of {', '.join(known)}.")
        return cls(**values)

    def to_json(self, path: Union[str, os.PathLike, None] = None) -> str:
        """Returns the config as JSON text; with `path`, also writes it there (atomically)."""
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        if path is not None:
            write_atomically(path, text)
        return text

    @classmethod
    def from_json(cls, text_or_path: Union[str, os.PathLike], overrides: Sequence[str] = ()):
        """Reads a config from JSON text or from a JSON file, with "field=value" `overrides` (see `with_overrides`)
        applied before it is made, and so checked once."""
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            path = pathlib.Path(text_or_path)
            if not path.is_file():
                raise ConfigError(f"config file {path} does not exist. Fix: pass a JSON file or a preset name.")
            text = path.read_text()
        try:
            values = json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"config is not valid JSON ({error}). Fix: check the file's syntax.") from None
        if overrides and isinstance(values, Mapping):
            values = {**values, **cls._override_changes(overrides)}
        return cls.from_dict(values)

    def replace(self, **changes):
        """A copy with some fields changed, validated again."""
        return self.from_dict({**self.to_dict(), **changes})

    def with_overrides(self, overrides: Sequence[str]):
        """Applies "field=value" strings, the value in JSON ("d_model=256", "seed=null") or a bare word."""
        return self.replace(**self._override_changes(overrides))

    @staticmethod
    def _override_changes(overrides: Sequence[str]) -> dict:
        """The "field=value" strings as a dict of field -> value (see `with_overrides`)."""
        changes = {}
        for override in overrides:
            key, separator, raw = override.partition("=")
            if not separator:
                raise ConfigError(f"override {override!r} is not field=value. Fix: write e.g. d_model=256.")
            try:
                changes[key.strip()] = json.loads(raw)
            except json.JSONDecodeError:
                changes[key.strip()] = raw  # a bare word such as learned or a path
        return changes

    def _check_field_types(self, examples: Optional[Mapping[str, Any]] = None) -> None:
        """The one type check of the config dataclasses: each field against its annotation (`int`, `float`,
        `bool`, `str`, or `Optional[...]` of one), as a `ConfigError` that names the field and an example.

        What JSON writers and overrides produce is normalised in place: an int for a float field (1 is a fine
        dropout of 1.0), an integral float for an int field (512.0). Bools are not ints here.
        """
        for field in dataclasses.fields(self):
            annotation = str(field.type)
            optional = annotation.startswith("Optional[")
            base = _TYPES[annotation[len("Optional[") : -1] if optional else annotation]
            value = getattr(self, field.name)
            if optional and value is None:
                continue
            if base is float and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, field.name, float(value))
                continue
            if base is int and isinstance(value, float) and value.is_integer():
                object.__setattr__(self, field.name, int(value))
                continue
            if not isinstance(value, base) or (base is int and isinstance(value, bool)):
                kind = f"{base.__name__} or null" if optional else base.__name__
                example = (examples or {}).get(field.name, field.default)
                raise ConfigError(
                    f"{field.name}: expected {kind}, got {value!r} ({type(value).__name__}). "
                    f"Fix: set {field.name} to {kind}, e.g. {field.name}={json.dumps(example)}."
                )


_TYPES = {"int": int, "float": float, "bool": bool, "str": str}


def unknown_option(name: str, value: Any, options: Sequence[str]) -> str:
    """The error message for a field whose value is not one of `options`."""
    return f"{name}: unknown option {value!r}. Fix: use one of {', '.join(repr(o) for o in options)}."


@dataclasses.dataclass(frozen=True)
class TransformerConfig(JsonConfig):
    """Hyperparameters of a Transformer (Vaswani et al., 2017), validated on creation.

    The defaults are the paper's base model with its 37,000-token shared vocabulary. A config is frozen:
    derive variants with `config.replace(field=value)` or `config.with_overrides(["field=value"])`,
    which validate again.

    Attributes:
        vocab_size: source vocabulary size (and the target's when `target_vocab_size` is None).
        target_vocab_size: target vocabulary size; None means one shared vocabulary.
        share_embeddings: one embedding matrix for source and target (needs one shared vocabulary).
        tie_output_projection: the pre-softmax projection reuses the target embedding matrix.
        d_model: width of every sublayer output and of the embeddings.
        d_ff: inner width of the position-wise feed-forward network.
        num_heads: attention heads h.
        d_k: width of each head's queries and keys; None means d_model / num_heads.
        d_v: width of each head's values; None means d_model / num_heads (Table 3 row B varies d_k only).
        num_encoder_layers, num_decoder_layers: N for each stack.
        dropout: P_drop on every sublayer output and on the embedding + position sums.
        dropout_by_epochs: None, or the dropout a run with a time budget (`budget_schedule`) trains with, chosen
            from the epochs it predicts: "0:0.1,35:0.2" is 0.1 below 35 epochs and 0.2 from 35 on (pairs of
            epochs:dropout, ascending, the first at 0). The choice replaces `dropout` once the run has predicted
            its steps (train_config.json's "budget" records it); runs without a budget plan train at `dropout`.
            An override of `dropout` alone (`with_overrides(["dropout=0.3"])`) turns the rule off: it trains at 0.3.
        dropout_rule_parameters: None, or the `stack_parameters` of the model `dropout_by_epochs` was measured on:
            the rule then reads a model's planned epochs times its own `stack_parameters` over this count, so that
            a model with k times the weights reaches each threshold in 1/k the epochs (it overfits sooner:
            docs/multi30k.md, issue 40). None: the rule reads the epochs as they are, whatever the model's size.
        initial_dropout, initial_dropout_fraction: the first `initial_dropout_fraction` of a budget plan's steps
            (its segment's, fixed when the plan first predicts its end) train at `initial_dropout`, the rest at the
            dropout above (chosen or not): 0 then 0.1 is "late dropout", 0.1 then 0 "early dropout" (Liu et al.
            2023, "Dropout Reduces Underfitting"). 0 (the default): the dropout from the start. Needs a budget plan
            (`budget_schedule`, a time limit).
        attention_dropout: dropout on the attention weights (0 in the paper).
        activation_dropout: dropout on the feed-forward's inner activations (0 in the paper).
        label_smoothing: epsilon_ls of the training loss.
        subword_nbest_size, subword_alpha: subword regularization (Kudo 2018): the training pairs are cut into
            pieces sampled anew each time they are read, from the `subword_nbest_size` best segmentations of the
            SentencePiece vocabulary (-1: all of them), with probabilities raised to `subword_alpha` (lower:
            flatter, more varied). 0 (the default) cuts them the one best way, as validation, translation and
            export always do. Needs a SentencePiece vocabulary, and neither `deterministic` batches nor
            multi-worker training (tf-text's sampling takes no seed).
        max_length: the longest sequence (source or target, in tokens) the model accepts.
        position_encoding: "sinusoidal" (the paper) or "learned".
        norm_first: False for the paper's post-norm LayerNorm(x + Sublayer(x)), True for pre-norm.
        attention_window: None for full attention; an int r restricts self-attention to |i - j| <= r.
        layer_norm_epsilon: epsilon of every LayerNormalization.
        activation: the feed-forward non-linearity, "relu" (the paper) or "gelu".
        warmup_steps: warmup of the learning-rate schedule.
        learning_rate_scale: a constant multiplying the paper's learning-rate formula.
        pad_id: the padding token id; always 0 in this package.
        bos_id, eos_id: start and end of sequence token ids.
        decode_beam_size, decode_length_penalty, decode_method, decode_average_last: how to decode this model
            (defaults: `tf_transformer.decoding.settings.COMMAND_DEFAULTS`, the paper's beam and length penalty);
        decode_no_repeat_ngram_size, decode_max_decode_length: the guards against loops (N: no repeated N-gram,
            0: off; "Ax+B": at most A x the source length + B tokens, or N tokens; defaults as above).
            `tft-train` writes them into the model directory's decoding.json, the defaults of `tft-translate`,
            `tft-evaluate` and `tft-export`. They do not change the model or its training.
    """

    vocab_size: int = 37000
    target_vocab_size: Optional[int] = None
    share_embeddings: bool = True
    tie_output_projection: bool = True
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    d_k: Optional[int] = None
    d_v: Optional[int] = None
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    dropout: float = 0.1
    dropout_by_epochs: Optional[str] = None
    dropout_rule_parameters: Optional[int] = None
    initial_dropout: float = 0.0
    initial_dropout_fraction: float = 0.0
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    label_smoothing: float = 0.1
    subword_nbest_size: int = 0
    subword_alpha: float = 0.1
    max_length: int = 512
    position_encoding: str = "sinusoidal"
    norm_first: bool = False
    attention_window: Optional[int] = None
    layer_norm_epsilon: float = 1e-6
    activation: str = "relu"
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    decode_beam_size: int = COMMAND_DEFAULTS.beam_size
    decode_length_penalty: float = COMMAND_DEFAULTS.length_penalty
    decode_method: str = COMMAND_DEFAULTS.method
    decode_average_last: Optional[int] = COMMAND_DEFAULTS.average_last
    decode_no_repeat_ngram_size: int = COMMAND_DEFAULTS.no_repeat_ngram_size
    decode_max_decode_length: str = COMMAND_DEFAULTS.max_decode_length

    def __post_init__(self):
        self._check_types()
        self._check_values()

    # ----------------------------------------------------------------------------------------- validation

    def _check_types(self):
        if isinstance(self.decode_max_decode_length, int) and not isinstance(self.decode_max_decode_length, bool):
            # An absolute cap is an int in JSON and in --override; the field holds both forms as a string.
            object.__setattr__(self, "decode_max_decode_length", str(self.decode_max_decode_length))
        self._check_field_types()

    def _check_sizes(self):
        """The dimensions and depths: positive, and heads that split d_model evenly (unless d_k, d_v are set)."""
        for name in ("vocab_size", "d_model", "d_ff", "num_heads", "max_length", "warmup_steps"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}: must be positive, got {getattr(self, name)}. Fix: set {name} >= 1.")
        if self.num_encoder_layers < 1:
            raise ConfigError(
                f"num_encoder_layers: must be >= 1, got {self.num_encoder_layers}. Fix: set the encoder depth N."
            )
        if self.num_decoder_layers < 0:
            raise ConfigError(
                f"num_decoder_layers: must be >= 0 (0 for an encoder-only classifier), got "
                f"{self.num_decoder_layers}. Fix: set the decoder depth N."
            )
        self._check_positive_or_null(
            "target_vocab_size", "set it to the target vocabulary size, or null for one shared vocabulary."
        )
        if self.d_k is None or self.d_v is None:
            if self.d_model % self.num_heads:
                raise ConfigError(
                    f"d_model: {self.d_model} is not divisible by num_heads={self.num_heads}, so the heads "
                    f"cannot split it evenly. Fix: choose d_model a multiple of num_heads (e.g. "
                    f"{self.num_heads * max(1, round(self.d_model / self.num_heads))}), or set d_k and d_v."
                )
        for name in ("d_k", "d_v"):
            self._check_positive_or_null(name, f"set {name} >= 1 or null.")

    def _check_positive_or_null(self, name, fix):
        """Raises ConfigError, ending with `fix`, when the optional field `name` is set and not positive."""
        value = getattr(self, name)
        if value is not None and value <= 0:
            raise ConfigError(f"{name}: must be positive or null, got {value}. Fix: {fix}")

    def _check_rates(self):
        """Dropout and label smoothing in [0, 1), a well-formed `dropout_by_epochs`, and subword sampling's alpha."""
        for name in (
            "dropout", "initial_dropout", "initial_dropout_fraction", "attention_dropout", "activation_dropout",
            "label_smoothing",
        ):  # fmt: skip
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"{name}: must be in [0, 1), got {value}. Fix: use e.g. {name}=0.1.")
        self.dropout_rule()  # raises ConfigError when malformed
        self._check_positive_or_null(
            "dropout_rule_parameters",
            "set it to the stack_parameters of the model the dropout rule was measured on, or null.",
        )
        if self.samples_subwords and self.subword_alpha <= 0:
            raise ConfigError(
                f"subword_alpha: must be positive when subword_nbest_size samples, got {self.subword_alpha}. "
                "Fix: use e.g. subword_alpha=0.1, or subword_nbest_size=0 to turn sampling off."
            )

    def _check_options(self):
        """The named options (position encoding, activation) and the positive settings of attention and training."""
        if self.position_encoding not in POSITION_ENCODINGS:
            raise ConfigError(unknown_option("position_encoding", self.position_encoding, POSITION_ENCODINGS))
        if self.activation not in ACTIVATIONS:
            raise ConfigError(unknown_option("activation", self.activation, ACTIVATIONS))
        if self.attention_window is not None and self.attention_window < 0:
            raise ConfigError(
                f"attention_window: must be >= 0 or null, got {self.attention_window}. "
                "Fix: use null for full attention or r >= 0 to attend to |i - j| <= r."
            )
        if self.layer_norm_epsilon <= 0:
            raise ConfigError(
                f"layer_norm_epsilon: must be positive, got {self.layer_norm_epsilon}. Fix: use e.g. 1e-6."
            )
        if self.learning_rate_scale <= 0:
            raise ConfigError(
                f"learning_rate_scale: must be positive, got {self.learning_rate_scale}. Fix: use e.g. 1.0."
            )

    def _check_padding(self):
        """Padding is token id 0 throughout the package."""
        if self.pad_id != 0:
            raise ConfigError(
                f"pad_id: token id 0 is padding everywhere in tf_transformer, got {self.pad_id}. "
                "Fix: set pad_id=0 and give padding id 0 in your vocabulary."
            )

    def _check_values(self):
        # The named checks in a fixed order: a config with several problems names the same one first every time.
        self._check_sizes()
        self._check_rates()
        self._check_options()
        self._check_padding()
        try:
            check_settings({name[len("decode_") :]: getattr(self, name) for name in DECODE_FIELDS}, prefix="decode_")
        except ValueError as error:
            raise ConfigError(str(error)) from None
        self._check_token_ids()

    def _check_token_ids(self):
        """bos and eos: distinct ids inside both vocabularies; one shared embedding needs one vocabulary."""
        smallest_vocab = min(self.vocab_size, self.output_vocab_size)
        for name in ("bos_id", "eos_id"):
            value = getattr(self, name)
            if not 0 < value < smallest_vocab:
                raise ConfigError(
                    f"{name}: must be a token id in [1, {smallest_vocab}) (0 is padding), got {value}. "
                    f"Fix: set {name} to the id your vocabulary uses."
                )
        if self.bos_id == self.eos_id:
            raise ConfigError(
                f"bos_id, eos_id: both are {self.bos_id}. Fix: give start and end of sequence different ids."
            )
        if self.share_embeddings and self.output_vocab_size != self.vocab_size:
            raise ConfigError(
                f"share_embeddings: one embedding matrix needs one vocabulary, but vocab_size={self.vocab_size} "
                f"and target_vocab_size={self.target_vocab_size}. Fix: set share_embeddings=false, or use one "
                "joint vocabulary (target_vocab_size=null)."
            )

    @staticmethod
    def _override_changes(overrides: Sequence[str]) -> dict:
        """`JsonConfig._override_changes`; a `dropout` given without `dropout_by_epochs` also turns that rule off, so
        that `--override=dropout=0.3` trains at 0.3 whatever the run's budget."""
        changes = JsonConfig._override_changes(overrides)
        if "dropout" in changes:
            changes.setdefault("dropout_by_epochs", None)
        return changes

    # ----------------------------------------------------------------------------------------- derived

    @property
    def output_vocab_size(self) -> int:
        """The target vocabulary size: `target_vocab_size`, or `vocab_size` for one shared vocabulary."""
        return self.vocab_size if self.target_vocab_size is None else self.target_vocab_size

    @property
    def samples_subwords(self) -> bool:
        """Whether training samples its subword segmentations (`subword_nbest_size` other than 0 and 1)."""
        return self.subword_nbest_size not in (0, 1)

    def dropout_rule(self) -> tuple:
        """`dropout_by_epochs` as ((epochs, dropout), ...), ascending; () when None.

        Raises:
            ConfigError: not pairs of epochs:dropout, epochs not ascending from 0, or a dropout outside [0, 1).
        """
        if self.dropout_by_epochs is None:
            return ()
        fix = 'Fix: write epochs:dropout pairs, ascending from 0, e.g. dropout_by_epochs="0:0.1,35:0.2", or null.'
        pairs = []
        for item in self.dropout_by_epochs.split(","):
            epochs, separator, rate = item.partition(":")
            try:
                pair = (float(epochs), float(rate))
            except ValueError:
                pair = None
            if not separator or pair is None:
                raise ConfigError(f"dropout_by_epochs: {item.strip()!r} is not epochs:dropout. {fix}")
            if not 0.0 <= pair[1] < 1.0:
                raise ConfigError(f"dropout_by_epochs: the dropout of {item.strip()!r} is not in [0, 1). {fix}")
            pairs.append(pair)
        epochs = [pair[0] for pair in pairs]
        if epochs[0] != 0 or any(later <= earlier for earlier, later in zip(epochs[:-1], epochs[1:], strict=True)):
            raise ConfigError(f"dropout_by_epochs: the epochs {epochs} do not ascend from 0. {fix}")
        return tuple(pairs)

    @property
    def has_initial_dropout(self) -> bool:
        """Whether a budget plan trains its first steps at `initial_dropout` (`initial_dropout_fraction` > 0)."""
        return self.initial_dropout_fraction > 0

    @property
    def stack_parameters(self) -> int:
        """The weight matrices of the encoder and decoder layers (attention projections and feed-forward kernels;
        embeddings, biases and LayerNorms left out): the model's size as the dropout rule reads it."""
        attention = self.d_model * self.num_heads * (2 * self.key_dim + 2 * self.value_dim)
        feed_forward = 2 * self.d_model * self.d_ff
        return self.num_encoder_layers * (attention + feed_forward) + self.num_decoder_layers * (
            2 * attention + feed_forward
        )

    @property
    def dropout_rule_scale(self) -> float:
        """What the dropout rule multiplies a run's epochs by: `stack_parameters` over `dropout_rule_parameters`
        (1.0 when that is None)."""
        if self.dropout_rule_parameters is None:
            return 1.0
        return self.stack_parameters / self.dropout_rule_parameters

    def dropout_for_epochs(self, epochs: float) -> float:
        """The dropout `dropout_by_epochs` gives a run of `epochs` epochs (`dropout` when it is None), read at
        the model's size (`dropout_rule_scale`)."""
        rate = self.dropout
        scaled_epochs = epochs * self.dropout_rule_scale
        for threshold, rule_rate in self.dropout_rule():
            if scaled_epochs >= threshold:
                rate = rule_rate
        return rate

    @property
    def key_dim(self) -> int:
        """Width of each head's queries and keys: `d_k`, or d_model / num_heads."""
        return self.d_k if self.d_k is not None else self.d_model // self.num_heads

    @property
    def value_dim(self) -> int:
        """Width of each head's values: `d_v`, or d_model / num_heads."""
        return self.d_v if self.d_v is not None else self.d_model // self.num_heads

    # ----------------------------------------------------------------------------------------- in and out

    @classmethod
    def from_preset(cls, name: str, overrides: Sequence[str] = ()) -> "TransformerConfig":
        """Loads `configs/<name>.json`, e.g. "tiny", "base", "big" or a Table 3 variation, with `overrides`
        (`from_json`)."""
        presets = list_presets()
        if name not in presets:
            close = difflib.get_close_matches(name, presets, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"no preset named {name!r}.{hint} Fix: use one of {', '.join(presets)}.")
        return cls.from_json(_preset_text(name), overrides)

    @classmethod
    def load(cls, name_or_path: Union[str, os.PathLike], overrides: Sequence[str] = ()) -> "TransformerConfig":
        """A preset name ("base") or the path of a JSON file ("my_config.json"), with "field=value" `overrides`
        applied before the config is made and checked (`from_json`): the commands' `--config` and `--override`."""
        text = str(name_or_path)
        if text.endswith(".json") or os.sep in text or pathlib.Path(text).is_file():
            return cls.from_json(pathlib.Path(text), overrides)
        return cls.from_preset(text, overrides)


def _presets():
    """The folder of presets: `tf_transformer.configs` when installed, else the checkout's `configs/`.

    An installed `tf_transformer.configs` has no `__init__.py`, so it is a namespace package whose
    location is a `Traversable`, not always a real path: read it only through that interface.
    """
    try:
        return resources.files("tf_transformer.configs")
    except ModuleNotFoundError:
        return pathlib.Path(__file__).resolve().parent.parent / "configs"


def list_presets() -> list:
    """Names of the presets shipped with the package."""
    folder = _presets()
    if not folder.is_dir():
        return []
    return sorted(entry.name[: -len(".json")] for entry in folder.iterdir() if entry.name.endswith(".json"))


def _preset_text(name: str) -> str:
    return _presets().joinpath(f"{name}.json").read_text(encoding="utf-8")
