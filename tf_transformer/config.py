"""`TransformerConfig`: what shapes and computes a model's weights, the one object every model, checkpoint and export
is built from; `JsonConfig`, the JSON in and out of the package's config dataclasses."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import pathlib
from importlib import resources
from typing import Any, Mapping, Optional, Sequence, Union

from tf_transformer.decoding.settings import CONFIG_FIELDS
from tf_transformer.files import write_atomically

POSITION_ENCODINGS = ("sinusoidal", "learned")
ACTIVATIONS = ("relu", "gelu")
# Release 0.1's model config also held these settings, which now live with the value that owns them (field ->
# owner: `TrainConfig`, `DataConfig`, decoding.json; `tf_transformer.recipe` routes them). A config.json, .keras
# file or flat config file of that release still loads: `TransformerConfig.from_dict` sets them aside.
MOVED_FIELDS = {
    **dict.fromkeys(
        ("dropout_by_epochs", "dropout_rule_parameters", "initial_dropout", "initial_dropout_fraction",
         "label_smoothing", "warmup_steps", "learning_rate_scale"),
        "training",
    ),
    **dict.fromkeys(("subword_nbest_size", "subword_alpha"), "data"),
    **dict.fromkeys(CONFIG_FIELDS, "decoding"),
}  # fmt: skip


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
        cls._check_known(values)
        return cls(**values)

    @classmethod
    def _check_known(cls, names) -> None:
        """A ConfigError for the first of `names` that is not a field, suggesting the nearest."""
        known = [field.name for field in dataclasses.fields(cls)]
        for name in names:
            if name not in known:
                raise ConfigError(cls._unknown_field(str(name), known))

    @classmethod
    def _unknown_field(cls, name: str, known: Sequence[str]) -> str:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        return f"{name}: not a {cls.__name__} field.{hint} Fix: use one of {', '.join(known)}."

    def to_json(self, path: Union[str, os.PathLike, None] = None) -> str:
        """Returns the config as JSON text; with `path`, also writes it there (atomically)."""
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        if path is not None:
            write_atomically(path, text)
        return text

    @classmethod
    def from_json(cls, text_or_path: Union[str, os.PathLike]):
        """Reads a config from JSON text or from a JSON file."""
        return cls.from_dict(read_json(text_or_path))

    def replace(self, **changes):
        """A copy with some fields changed, validated again."""
        self._check_known(changes)
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


def read_json(text_or_path: Union[str, os.PathLike]) -> Any:
    """The values of JSON text (text that starts with "{") or of a JSON file, as a ConfigError naming the problem."""
    text, source = str(text_or_path), "config text"
    if not text.lstrip().startswith("{"):
        path = pathlib.Path(text_or_path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist. Fix: pass a JSON file or a preset name.")
        text, source = path.read_text(encoding="utf-8"), f"config file {path}"
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{source} is not valid JSON ({error}). Fix: check its syntax there.") from None


def unknown_option(name: str, value: Any, options: Sequence[str]) -> str:
    """The error message for a field whose value is not one of `options`."""
    return f"{name}: unknown option {value!r}. Fix: use one of {', '.join(repr(o) for o in options)}."


@dataclasses.dataclass(frozen=True)
class TransformerConfig(JsonConfig):
    """Hyperparameters of a Transformer (Vaswani et al., 2017): what shapes or computes its weights, validated on
    creation. How it trains (`TrainConfig`), how its data are cut into subwords (`DataConfig`) and how it is decoded
    (decoding.json) live with those values; a preset holds all four (`tf_transformer.recipe.Recipe`).

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
        dropout: P_drop on every sublayer output and on the embedding + position sums (`TrainConfig`'s dropout rule
            may choose it during a run).
        attention_dropout: dropout on the attention weights (0 in the paper).
        activation_dropout: dropout on the feed-forward's inner activations (0 in the paper).
        max_length: the longest sequence (source or target, in tokens) the model accepts.
        position_encoding: "sinusoidal" (the paper) or "learned".
        norm_first: False for the paper's post-norm LayerNorm(x + Sublayer(x)), True for pre-norm.
        attention_window: None for full attention; an int r restricts self-attention to |i - j| <= r.
        layer_norm_epsilon: epsilon of every LayerNormalization.
        activation: the feed-forward non-linearity, "relu" (the paper) or "gelu".
        pad_id: the padding token id; always 0 in this package.
        bos_id, eos_id: start and end of sequence token ids.
    """

    # The fields that shape no weight: a resumed or fine-tuning run may change them (every other field must stay
    # that of the weights it continues; the vocabulary sizes are resolved from the vocabulary, not changed).
    CHANGEABLE_FIELDS = ("dropout", "attention_dropout", "activation_dropout")

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
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    max_length: int = 512
    position_encoding: str = "sinusoidal"
    norm_first: bool = False
    attention_window: Optional[int] = None
    layer_norm_epsilon: float = 1e-6
    activation: str = "relu"
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self):
        self._check_field_types()
        self._check_values()

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "TransformerConfig":
        """`JsonConfig.from_dict` of the model's fields, or of a recipe's "model" section (a preset). The settings
        release 0.1 kept here (`MOVED_FIELDS`) are set aside: its config.json and .keras files load."""
        if isinstance(values, Mapping):
            if isinstance(values.get("model"), Mapping):
                values = values["model"]
            values = {key: value for key, value in values.items() if key not in MOVED_FIELDS}
        return super().from_dict(values)

    @classmethod
    def _unknown_field(cls, name: str, known: Sequence[str]) -> str:
        if name not in MOVED_FIELDS:
            return super()._unknown_field(name, known)
        owner = {"training": "TrainConfig", "data": "DataConfig", "decoding": "decoding.json"}[MOVED_FIELDS[name]]
        return (
            f"{name}: not a TransformerConfig field: a {MOVED_FIELDS[name]} setting, kept by {owner}. Fix: set it "
            f"there, or in a recipe (tf_transformer.recipe.Recipe, tft-train --override={name}=...), which routes it."
        )

    # ----------------------------------------------------------------------------------------- validation

    def _check_sizes(self):
        """The dimensions and depths: positive, and heads that split d_model evenly (unless d_k, d_v are set)."""
        for name in ("vocab_size", "d_model", "d_ff", "num_heads", "max_length"):
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
        """Dropout rates in [0, 1)."""
        for name in self.CHANGEABLE_FIELDS:
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"{name}: must be in [0, 1), got {value}. Fix: use e.g. {name}=0.1.")

    def _check_options(self):
        """The named options (position encoding, activation), the attention window and LayerNorm's epsilon."""
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

    # ----------------------------------------------------------------------------------------- derived

    @property
    def output_vocab_size(self) -> int:
        """The target vocabulary size: `target_vocab_size`, or `vocab_size` for one shared vocabulary."""
        return self.vocab_size if self.target_vocab_size is None else self.target_vocab_size

    @property
    def stack_parameters(self) -> int:
        """The weight matrices of the encoder and decoder layers (attention projections and feed-forward kernels;
        embeddings, biases and LayerNorms left out): the model's size as the dropout rule reads it
        (`TrainConfig.dropout_rule_parameters`)."""
        attention = self.d_model * self.num_heads * (2 * self.key_dim + 2 * self.value_dim)
        feed_forward = 2 * self.d_model * self.d_ff
        return self.num_encoder_layers * (attention + feed_forward) + self.num_decoder_layers * (
            2 * attention + feed_forward
        )

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
    def from_preset(cls, name: str) -> "TransformerConfig":
        """The model of the preset `configs/<name>.json` (the whole preset: `tf_transformer.recipe.Recipe.load`)."""
        return cls.from_json(preset_text(name))

    @classmethod
    def load(cls, name_or_path: Union[str, os.PathLike]) -> "TransformerConfig":
        """The model of a preset name ("base") or of a JSON file ("my_config.json")."""
        return cls.from_json(preset_or_file(name_or_path))


def preset_or_file(name_or_path: Union[str, os.PathLike]) -> Union[str, pathlib.Path]:
    """What `from_json` reads for a preset name ("base": its JSON text) or a JSON file's path."""
    text = str(name_or_path)
    if text.endswith(".json") or os.sep in text or pathlib.Path(text).is_file():
        return pathlib.Path(text)
    return preset_text(text)


def preset_text(name: str) -> str:
    """The JSON text of the preset `name`; a ConfigError that names the nearest preset when there is none."""
    presets = list_presets()
    if name not in presets:
        close = difflib.get_close_matches(name, presets, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"no preset named {name!r}.{hint} Fix: use one of {', '.join(presets)}.")
    return _presets().joinpath(f"{name}.json").read_text(encoding="utf-8")


def _presets():
    """The presets folder: `tf_transformer.configs` when installed (a namespace package, whose location is a
    `Traversable`, not always a real path: read it only through that interface), else the checkout's `configs/`."""
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
