"""`Recipe`: what a preset (`configs/*.json`, `tft-train --config`) holds, each setting in the value that owns it.

- `model`: the `TransformerConfig`, what shapes or computes the weights;
- `training`: how it trains, the `TrainConfig` fields of `TrainConfig.RECIPE_FIELDS` (schedule, label smoothing,
  dropout rule); a run's other `TrainConfig` fields come from tft-train's flags;
- `data`: subword sampling, the `DataConfig` fields of `DataConfig.SUBWORD_FIELDS`;
- `decoding`: the `DecodingSettings` `tft-train` writes into decoding.json (keys `JSON_SETTINGS`).

A preset file has one JSON object per section ("model", "training", "data", "decoding"; each may be left out). A flat
file of field names, such as a config.json or config file of release 0.1, whose model config held them all, loads
too. Overrides (`--override=field=value`) and `Recipe.replace` name each setting by its flat name: a model field, a
training or subword field, or `decode_<key>` for decoding.json's `<key>`; each goes to the value that owns it.

Example:

>>> recipe = Recipe.load("multi30k").with_overrides(["dropout=0.2", "warmup_steps=4000", "decode_beam_size=6"])
>>> recipe.model.dropout, recipe.training["warmup_steps"], recipe.decoding.beam_size
(0.2, 4000, 6)
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import pathlib
from typing import Any, Dict, Mapping, Sequence, Tuple, Union

from tf_transformer.config import ConfigError, JsonConfig, TransformerConfig, preset_or_file, read_json
from tf_transformer.data.config import DataConfig
from tf_transformer.decoding.settings import (
    COMMAND_DEFAULTS,
    CONFIG_FIELDS,
    JSON_SETTINGS,
    DecodingSettings,
    check_settings,
    recorded_settings,
)
from tf_transformer.files import write_atomically
from tf_transformer.model_dir import CONFIG_FILE, DATA_CONFIG_FILE, TRAIN_CONFIG_FILE
from tf_transformer.training.train_config import TrainConfig, saved_values

SECTIONS = ("model", "training", "data", "decoding")


def _routes() -> Dict[str, Tuple[str, str]]:
    """Each setting's flat name -> (its section, its name there)."""
    routes = {field.name: ("model", field.name) for field in dataclasses.fields(TransformerConfig)}
    routes.update({name: ("training", name) for name in TrainConfig.RECIPE_FIELDS})
    routes.update({name: ("data", name) for name in DataConfig.SUBWORD_FIELDS})
    routes.update({flat: ("decoding", key) for flat, key in CONFIG_FIELDS.items()})
    return routes


_ROUTES = _routes()
_SECTION_KEYS = {
    "training": TrainConfig.RECIPE_FIELDS, "data": DataConfig.SUBWORD_FIELDS, "decoding": JSON_SETTINGS,
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A model config and the training, subword and decoding settings that go with it.

    Attributes:
        model: the `TransformerConfig`.
        training: `TrainConfig.RECIPE_FIELDS` -> value (all of them; defaults for those not given).
        data: `DataConfig.SUBWORD_FIELDS` -> value (all of them).
        decoding: the `DecodingSettings` of decoding.json (`COMMAND_DEFAULTS` for those not given).

    Build a run's configs from it with `TrainConfig(model_dir=..., **recipe.training)` and
    `DataConfig(..., **recipe.data)`. Frozen: derive variants with `replace` or `with_overrides`.

    Raises:
        ConfigError: an unknown setting (naming the nearest) or a bad model or decoding value, naming it and the fix;
            a bad training or subword value is refused, the same way, when a run's TrainConfig or DataConfig is made.
    """

    model: TransformerConfig = TransformerConfig()
    training: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    data: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    decoding: DecodingSettings = COMMAND_DEFAULTS

    def __post_init__(self):
        # Names are checked here, values by their owners: once a run, when its TrainConfig and DataConfig are made.
        for section, owner in (("training", TrainConfig), ("data", DataConfig)):
            _check_keys(section, getattr(self, section))
            defaults = {field.name: field.default for field in dataclasses.fields(owner)}
            filled = {name: defaults[name] for name in _SECTION_KEYS[section]}
            object.__setattr__(self, section, {**filled, **getattr(self, section)})

    # ----------------------------------------------------------------------------------------- in and out

    @classmethod
    def load(cls, name_or_path: Union[str, os.PathLike], overrides: Sequence[str] = ()) -> "Recipe":
        """A preset name or a JSON file's path (sections or flat), with "field=value" `overrides` (as
        `with_overrides`) applied before any value is made, so that each is checked once.

        >>> recipe = Recipe.load("multi30k", ["dropout=0.2", "decode_beam_size=6"])
        >>> recipe.model.dropout, recipe.training["dropout_by_epochs"], recipe.decoding.beam_size
        (0.2, None, 6)
        """
        return cls.from_dict(_json_object(preset_or_file(name_or_path)), overrides)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], overrides: Sequence[str] = ()) -> "Recipe":
        """A recipe from its sections ({"model": {...}, "training": {...}, ...}) or from flat names, with
        `overrides` (`load`)."""
        if not isinstance(values, Mapping):
            raise ConfigError(f"a recipe must be a JSON object, got {type(values).__name__}.")
        if not any(key in SECTIONS for key in values):
            return cls().replace(**{**values, **_override_changes(overrides)})
        for key, section in values.items():
            if key not in SECTIONS:
                raise ConfigError(
                    f"{key}: a recipe with sections holds only {', '.join(SECTIONS)}. Fix: move it into its section."
                )
            if not isinstance(section, Mapping):
                raise ConfigError(f"{key}: must be a JSON object (field -> value), got {type(section).__name__}.")
        sections = {section: dict(values.get(section, {})) for section in SECTIONS}
        for name, value in _override_changes(overrides).items():
            section, key = _route(name)
            sections[section][key] = value
        return cls(
            TransformerConfig.from_dict(sections["model"]),
            sections["training"],
            sections["data"],
            _decoding(COMMAND_DEFAULTS, sections["decoding"], where="decoding"),
        )

    @classmethod
    def of_model_dir(cls, model_dir: Union[str, os.PathLike]) -> "Recipe":
        """The recipe a model directory was trained with: config.json's model, train_config.json's training
        settings, data_config.json's subword sampling and the decoding settings the run was given; a directory of
        release 0.1 keeps the last three in its config.json, read from there."""
        model_dir = pathlib.Path(model_dir)
        values = _json_object(model_dir / CONFIG_FILE)
        train, data = saved_values(model_dir / TRAIN_CONFIG_FILE), saved_values(model_dir / DATA_CONFIG_FILE)
        values.update({name: train[name] for name in TrainConfig.RECIPE_FIELDS if name in train})
        values.update({name: data[name] for name in DataConfig.SUBWORD_FIELDS if name in data})
        decoding = recorded_settings(model_dir) or {}
        values.update({flat: decoding[key] for flat, key in CONFIG_FIELDS.items() if key in decoding})
        return cls.from_dict(values)

    def to_dict(self) -> dict:
        """The sections as a JSON-ready dict (the format of `configs/*.json`)."""
        return {"model": self.model.to_dict(), "training": dict(self.training), "data": dict(self.data),
                "decoding": self.decoding.json_settings()}  # fmt: skip

    def to_json(self, path: Union[str, os.PathLike, None] = None) -> str:
        """The recipe as JSON text; with `path`, also written there (atomically)."""
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        if path is not None:
            write_atomically(path, text)
        return text

    # ----------------------------------------------------------------------------------------- variants

    def replace(self, **changes) -> "Recipe":
        """A copy with settings changed, each named by its flat name and given to the value that owns it."""
        sections = {section: {} for section in SECTIONS}
        for name, value in changes.items():
            section, key = _route(name)
            sections[section][key] = value
        return Recipe(
            self.model.replace(**sections["model"]) if sections["model"] else self.model,
            {**self.training, **sections["training"]},
            {**self.data, **sections["data"]},
            _decoding(self.decoding, sections["decoding"], prefix="decode_"),
        )

    def with_overrides(self, overrides: Sequence[str]) -> "Recipe":
        """The recipe with "field=value" strings applied by flat name; `dropout` alone turns `dropout_by_epochs` off."""
        return self.replace(**_override_changes(overrides))


def _override_changes(overrides: Sequence[str]) -> dict:
    """The "field=value" strings as flat name -> value; a `dropout` without `dropout_by_epochs` turns the rule off."""
    changes = JsonConfig._override_changes(overrides)
    if "dropout" in changes:
        changes.setdefault("dropout_by_epochs", None)
    return changes


def _route(name: str) -> Tuple[str, str]:
    """(section, key) of a flat setting name; a ConfigError naming the nearest when no value owns it."""
    if name not in _ROUTES:
        raise ConfigError(_unknown_setting(name))
    return _ROUTES[name]


def _decoding(settings: DecodingSettings, values: Mapping[str, Any], where: str = "", prefix: str = ""):
    """`settings` with decoding.json's `values`, each checked (a ValueError as a ConfigError naming it)."""
    try:
        check_settings(values, where, prefix)
        changed = dataclasses.replace(settings, **values)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if isinstance(changed.max_decode_length, int):  # decoding.json keeps a cap of N tokens as text, as "Ax+B"
        changed = dataclasses.replace(changed, max_decode_length=str(changed.max_decode_length))
    return changed


def _check_keys(section: str, values: Mapping[str, Any]) -> None:
    for key in values:
        if key not in _SECTION_KEYS[section]:
            close = difflib.get_close_matches(str(key), _SECTION_KEYS[section], n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            known = ", ".join(_SECTION_KEYS[section])
            raise ConfigError(f"{key}: not a {section} setting of a recipe.{hint} Fix: use one of {known}.")


def _unknown_setting(name: str) -> str:
    """The error for a flat name that no value of a recipe owns, naming the nearest (or the flag that sets it)."""
    for config in (TrainConfig, DataConfig):
        if name in {field.name for field in dataclasses.fields(config)}:
            return (
                f"{name}: a {config.__name__} setting of the run, not of a recipe. Fix: set it with tft-train "
                f"--{name}=... (or {config.__name__}({name}=...))."
            )
    close = difflib.get_close_matches(str(name), list(_ROUTES), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return (
        f"{name}: not a setting of a recipe (a model, training, subword or decode_* field).{hint} Fix: use one of "
        f"{', '.join(_ROUTES)}."
    )


def _json_object(text_or_path) -> dict:
    """The JSON object of a file (a `pathlib.Path`) or of JSON text, as a ConfigError when it is not one."""
    values = read_json(text_or_path)
    if not isinstance(values, dict):
        raise ConfigError(f"a recipe must be a JSON object, got {type(values).__name__}. Fix: check the file.")
    return values
