"""The decoding settings of a model directory: `decoding.json`, its defaults, and which value wins.

`tft-train` writes MODEL_DIR/decoding.json from the model config's `decode_*` fields (the paper's beam 4 and
length penalty 0.6 unless the config says otherwise): {"beam_size", "length_penalty", "method",
"average_last"}. `tft-translate`, `tft-evaluate` and `tft-export` read it: a flag the user gives wins, then
decoding.json, then the default here; a model directory without the file (an older run) decodes with the
defaults. Imports no TensorFlow (the commands' flags use these names before TensorFlow starts).
"""

from __future__ import annotations

import json
import numbers
import os
import pathlib
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from tf_transformer.files import write_atomically
from tf_transformer.model_dir import CONFIG_FILE, DECODING_FILE

METHODS = ("beam", "greedy", "sample")
# The default output length allowance: a sentence gets at most its source length + this many tokens, EOS
# included (the paper's "input length + 50").
EXTRA_DECODE_LENGTH = 50
# The paper's decoding: beam 4, length penalty alpha 0.6, one checkpoint (None: no averaging).
DEFAULTS: Dict[str, Any] = {"beam_size": 4, "length_penalty": 0.6, "method": "beam", "average_last": None}
# TransformerConfig field -> decoding.json key.
CONFIG_FIELDS = {f"decode_{name}": name for name in DEFAULTS}

PathLike = Union[str, os.PathLike]


def check_settings(values: Mapping[str, Any], where: str = "", prefix: str = "") -> Dict[str, Any]:
    """`values` (a subset of DEFAULTS' keys) checked; a ValueError that names `where` (e.g. the file), the key
    (after `prefix`, e.g. "decode_" for the config's fields) and the fix."""
    where = f"{where}: " if where else ""
    for name, value in values.items():
        if name not in DEFAULTS:
            raise ValueError(f"{where}{name!r} is not a decoding setting. Fix: use {', '.join(DEFAULTS)}.")
        if name == "beam_size":
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1
            fix = "an integer >= 1 (the paper: 4)"
        elif name == "length_penalty":
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and value >= 0
            fix = "a number >= 0 (the paper: 0.6)"
        elif name == "method":
            ok, fix = value in METHODS, f"one of {', '.join(METHODS)}"
        else:
            ok = value is None or (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1)
            fix = "null (the latest checkpoint) or an integer >= 1 (average the last N checkpoints)"
        if not ok:
            raise ValueError(f"{where}{prefix}{name}: must be {fix}, got {value!r}. Fix: set {prefix}{name} to {fix}.")
    return dict(values)


def read_decoding_json(model_dir: PathLike) -> Optional[Dict[str, Any]]:
    """MODEL_DIR/decoding.json's settings, checked; None when the file is missing (a run before it existed)."""
    path = pathlib.Path(model_dir) / DECODING_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        values = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error}). Fix: correct the file, or delete it for the defaults.") from None
    if not isinstance(values, dict):
        raise ValueError(f"{path}: must be a JSON object such as {json.dumps(DEFAULTS)}. Fix: correct the file.")
    return check_settings(values, str(path))


def settings_of_config(config) -> Dict[str, Any]:
    """The decoding settings a `TransformerConfig` (or a config.json dict) holds; defaults for absent fields."""
    values = config if isinstance(config, Mapping) else {field: getattr(config, field) for field in CONFIG_FIELDS}
    return {name: values.get(field, DEFAULTS[name]) for field, name in CONFIG_FIELDS.items()}


def update_decoding_json(model_dir: PathLike, config) -> bool:
    """Writes MODEL_DIR/decoding.json from the model config `config`, unless the file exists and the config
    sets what the model directory's current config.json set (so a resumed run keeps a hand edit or a tuned
    length penalty, while a run that changes a `decode_*` field rewrites it). Call it before config.json is
    rewritten, from the chief only. True when it wrote the file."""
    model_dir = pathlib.Path(model_dir)
    settings = settings_of_config(config)
    if (model_dir / DECODING_FILE).is_file():
        try:
            previous = settings_of_config(json.loads((model_dir / CONFIG_FILE).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            previous = None
        if previous == settings:
            return False
    write_atomically(model_dir / DECODING_FILE, json.dumps(settings, indent=2) + "\n")
    return True


def resolve_settings(
    given: Mapping[str, Any], model_dir: Optional[PathLike], checkpoint_given: bool = False
) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """`(settings, sources)`: each setting of DEFAULTS from `given` (the flags the user gave: name -> value),
    else from MODEL_DIR/decoding.json, else the default; `sources[name]` says which ("flag", "decoding.json",
    "default"). decoding.json's average_last applies only when neither a checkpoint nor average_last is given
    (`checkpoint_given`: the user chose the weights)."""
    from_file = read_decoding_json(model_dir) if model_dir is not None else None
    settings, sources = {}, {}
    for name, default in DEFAULTS.items():
        if name in given:
            settings[name], sources[name] = given[name], "flag"
        elif name == "average_last" and checkpoint_given:
            settings[name], sources[name] = None, "--checkpoint given"
        elif from_file is not None and name in from_file:
            settings[name], sources[name] = from_file[name], DECODING_FILE
        else:
            settings[name], sources[name] = default, "default"
    return settings, sources


def describe(settings: Mapping[str, Any], sources: Mapping[str, str]) -> str:
    """The log line: `Decoding: beam_size=4 (decoding.json), length_penalty=1.5 (decoding.json), ...`."""
    parts = [f"{name}={'none' if value is None else value} ({sources[name]})" for name, value in settings.items()]
    return "Decoding: " + ", ".join(parts)
