"""The decoding settings of a model directory: `decoding.json`, its defaults, and which value wins.

`tft-train` writes MODEL_DIR/decoding.json from the model config's `decode_*` fields (the paper's beam 4 and
length penalty 0.6 unless the config says otherwise): {"beam_size", "length_penalty", "method",
"average_last", "no_repeat_ngram_size", "max_decode_length"}. `tft-translate`, `tft-evaluate` and `tft-export`
read it: a flag the user gives wins, then decoding.json, then the default here; a model directory without the
file (an older run), or a key missing from it, decodes with the defaults. Imports no TensorFlow (the commands'
flags use these names before TensorFlow starts).
"""

from __future__ import annotations

import json
import numbers
import os
import pathlib
import re
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from tf_transformer.files import write_atomically
from tf_transformer.model_dir import CONFIG_FILE, DECODING_FILE

METHODS = ("beam", "greedy", "sample")
# The default output length allowance: a sentence gets at most its source length + this many tokens, EOS
# included (the paper's "input length + 50").
EXTRA_DECODE_LENGTH = 50
# The paper's decoding: beam 4, length penalty alpha 0.6, one checkpoint (None: no averaging); and the guards
# against degenerate loops on out-of-domain input (README, "Repetition guard and length cap"): no repeated
# 4-gram of pieces, at most 1.5 x the source length + 10 tokens (the paper: source length + 50, "x+50").
DEFAULTS: Dict[str, Any] = {
    "beam_size": 4, "length_penalty": 0.6, "method": "beam", "average_last": None, "no_repeat_ngram_size": 4,
    "max_decode_length": "1.5x+10",
}  # fmt: skip
# `max_decode_length` values: N (the most output tokens) or Ax+B (A times the source length plus B).
_RELATIVE_LENGTH = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)?\s*x\s*(?:\+\s*(\d+))?\s*$")
MAX_DECODE_LENGTH_FORMS = "N (at most N output tokens) or Ax+B (A times the source length plus B, e.g. 1.5x+10)"
# TransformerConfig field -> decoding.json key.
CONFIG_FIELDS = {f"decode_{name}": name for name in DEFAULTS}

PathLike = Union[str, os.PathLike]


def parse_max_decode_length(value, name: str = "max_decode_length") -> Tuple[Optional[int], float, int]:
    """`(max_decode_length, max_decode_length_ratio, extra_decode_length)`, the decoders' arguments, of a
    `max_decode_length` setting: an int N >= 1 or its digits ("120": at most N tokens, the other two then
    unused), or "Ax+B" (A a number >= 0, B an int >= 0; "x+50" is the paper's rule, "1.5x" has B = 0): at most
    floor(A * source length) + B tokens, as fairseq's max_len_a and max_len_b. A ValueError names `name`."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1:
        return int(value), 1.0, EXTRA_DECODE_LENGTH
    if isinstance(value, str):
        if value.strip().isdigit() and int(value) >= 1:
            return int(value), 1.0, EXTRA_DECODE_LENGTH
        match = _RELATIVE_LENGTH.match(value)
        if match:
            ratio, extra = match.groups()
            return None, float(ratio) if ratio is not None else 1.0, int(extra) if extra is not None else 0
    raise ValueError(
        f"{name}: must be {MAX_DECODE_LENGTH_FORMS}, got {value!r}. Fix: set {name} to e.g. 1.5x+10, x+50 (the "
        "paper) or 200."
    )


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
        elif name == "no_repeat_ngram_size":
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0
            fix = "an integer >= 0 (0: off; e.g. 4: no repeated 4-gram of output pieces)"
        elif name == "max_decode_length":
            parse_max_decode_length(value, f"{where}{prefix}{name}")
            continue
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
    # The settings the decoders do not check in this form (flags give strings): a one-line error naming the flag.
    check_settings({name: given[name] for name in ("no_repeat_ngram_size", "max_decode_length") if name in given},
                   prefix="--")  # fmt: skip
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


def guard_arguments(settings: Mapping[str, Any]) -> Dict[str, Any]:
    """The keyword arguments of the decoders (`translate`, `translate_texts`, `TranslationModule`) that the
    settings' no_repeat_ngram_size and max_decode_length give: no_repeat_ngram_size, max_decode_length,
    max_decode_length_ratio and extra_decode_length."""
    max_decode_length, ratio, extra = parse_max_decode_length(settings["max_decode_length"])
    return {
        "no_repeat_ngram_size": settings["no_repeat_ngram_size"],
        "max_decode_length": max_decode_length,
        "max_decode_length_ratio": ratio,
        "extra_decode_length": extra,
    }
