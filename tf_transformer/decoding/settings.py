"""Decoding settings: one frozen, checked value (`DecodingSettings`), its two default sets, decoding.json.

`DecodingSettings` holds every choice of a decoding run (method, beam, length penalty, n-best, sampling, the
guards against loops, the length cap rule, the minimum length, checkpoint averaging) and checks them when it
is built, so `translate`, the decoders, `TextTranslator`, `translate_texts`, the export, the attention plots
and the tuning take one value and check nothing themselves. Two default sets, each number written once:

- `PAPER` (= `DecodingSettings()`): the library's, the paper's decoding: beam search, its beam size and length
  penalty, no n-gram ban, at most source length + 50 tokens ("x+50").
- `COMMAND_DEFAULTS`: the commands' and decoding.json's, the paper's plus the guards against degenerate loops
  on out-of-domain input (docs/decoding.md, "Repetition guard and length cap"): no repeated 4-gram of pieces,
  at most 1.5 x the source length + 10 tokens.

`tft-train` writes MODEL_DIR/decoding.json (keys: `JSON_SETTINGS`) from its recipe's decoding settings (a preset's
"decoding" section, `--override=decode_<key>=...`; `tf_transformer.recipe`). `tft-translate`,
`tft-evaluate`, `tft-export` and `tft-plot-attention` read it: a flag the user gives wins, then decoding.json,
then `COMMAND_DEFAULTS`; a model directory without the file (an older run), or a key missing from it, decodes
with the defaults. Imports no TensorFlow (the commands build and check the settings before TensorFlow starts).
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
import pathlib
import re
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional, Tuple, Union

from tf_transformer.files import write_atomically
from tf_transformer.model_dir import CONFIG_FILE, DECODING_FILE, DECODING_RECORD, TRAIN_CONFIG_FILE

METHODS = ("beam", "greedy", "sample")
# `max_decode_length` values: N (the most output tokens) or Ax+B (A times the source length plus B).
_RELATIVE_LENGTH = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)?\s*x\s*(?:\+\s*(\d+))?\s*$")
MAX_DECODE_LENGTH_FORMS = "N (at most N output tokens) or Ax+B (A times the source length plus B, e.g. 1.5x+10)"
# The settings decoding.json holds: the one list of its keys.
JSON_SETTINGS = ("beam_size", "length_penalty", "method", "average_last", "no_repeat_ngram_size", "max_decode_length")
# A recipe's flat name of each (`--override=decode_beam_size=6`; release 0.1's model-config field) -> its key.
CONFIG_FIELDS = {f"decode_{name}": name for name in JSON_SETTINGS}
# The paper's output length allowance: a sentence gets at most its source length + this many tokens, EOS included.
EXTRA_DECODE_LENGTH = 50
_SAMPLING = ("temperature", "top_k", "top_p", "seed")

PathLike = Union[str, os.PathLike]


def is_int(value) -> bool:
    """A Python or NumPy integer, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_tensor(value) -> bool:
    # Told by its type's module: importing TensorFlow to ask would slow every command's start.
    return type(value).__module__.startswith("tensorflow")


class LengthCap(NamedTuple):
    """The length cap rule of a `max_decode_length` setting, in the one order every decoder reads it:
    `max_decode_length` N (an int, or an int scalar tensor; `ratio` and `extra` then unused) or None for
    "Ax+B", whose A is `ratio` and B `extra` (fairseq's max_len_a and max_len_b)."""

    max_decode_length: Any
    ratio: float
    extra: int


def parse_max_decode_length(value, name: str = "max_decode_length") -> LengthCap:
    """The `LengthCap` of a `max_decode_length` setting: an int N >= 1 or its digits ("120": at most N tokens),
    or "Ax+B" (A a number >= 0, B an int >= 0; "x+50" is the paper's rule, "1.5x" has B = 0): at most
    floor(A * source length) + B tokens. A ValueError names `name`."""
    if is_int(value) and value >= 1:
        return LengthCap(int(value), 1.0, EXTRA_DECODE_LENGTH)
    if isinstance(value, str):
        if value.strip().isdigit() and int(value) >= 1:
            return LengthCap(int(value), 1.0, EXTRA_DECODE_LENGTH)
        match = _RELATIVE_LENGTH.match(value)
        if match:
            ratio, extra = match.groups()
            return LengthCap(None, float(ratio) if ratio is not None else 1.0, int(extra) if extra is not None else 0)
    raise ValueError(
        f"{name}: must be {MAX_DECODE_LENGTH_FORMS}, got {value!r}. Fix: set {name} to e.g. 1.5x+10, x+50 (the "
        "paper) or 200."
    )


# Each setting's check and what it must be, for every way it arrives (Python, decoding.json, config, flags).
_CHECKS: Dict[str, Tuple[Callable[[Any], bool], Callable[[], str]]] = {
    "method": (lambda v: v in METHODS, lambda: f"one of {', '.join(METHODS)}"),
    "beam_size": (lambda v: is_int(v) and v >= 1, lambda: f"an integer >= 1 (the paper: {PAPER.beam_size})"),
    "length_penalty": (
        lambda v: _is_number(v) and v >= 0,
        lambda: f"a number >= 0 (0: the raw log-probability sum; the paper: {PAPER.length_penalty})",
    ),
    "n_best": (lambda v: is_int(v) and v >= 1, lambda: "an integer >= 1 (1: the best hypothesis only)"),
    "temperature": (
        lambda v: _is_number(v) and v >= 0,
        lambda: "a number >= 0 (1.0: sample from the model, < 1 for sharper outputs, 0 for greedy)",
    ),
    "top_k": (lambda v: is_int(v) and v >= 0, lambda: "an integer >= 0 (0: no limit; e.g. 40)"),
    "top_p": (lambda v: _is_number(v) and 0 < v <= 1, lambda: "a number in (0, 1] (1.0: off; e.g. 0.9)"),
    "seed": (
        lambda v: v is None or is_int(v) or _is_tensor(v),
        lambda: "None (a fresh seed every call), an integer or an int scalar tensor",
    ),
    "no_repeat_ngram_size": (
        lambda v: is_int(v) and v >= 0,
        lambda: "an integer >= 0 (0: off; e.g. 4: no repeated 4-gram of output pieces)",
    ),
    "min_decode_length": (
        lambda v: is_int(v) and v >= 0,
        lambda: "an integer >= 0 (0: no minimum; else the fewest output tokens, EOS included)",
    ),
    "average_last": (
        lambda v: v is None or (is_int(v) and v >= 1),
        lambda: "null (the latest checkpoint) or an integer >= 1 (average the last N checkpoints)",
    ),
}


def _check(name: str, value, where: str = "", prefix: str = "") -> None:
    """A ValueError unless `value` is a valid `name` setting, naming `where` it came from (e.g. "decoding.json: ")
    and the setting as the user wrote it (`prefix`: "--" for a flag, "decode_" for a config field)."""
    if name == "max_decode_length":
        if not _is_tensor(value):
            parse_max_decode_length(value, f"{where}{prefix}{name}")
        return
    ok, must = _CHECKS[name]
    if not ok(value):
        label = f"{prefix}{name}"
        raise ValueError(f"{where}{label}: must be {must()}, got {value!r}. Fix: set {label} to {must()}.")


@dataclasses.dataclass(frozen=True)
class DecodingSettings:
    """How to decode, checked when built: every setting of `translate` and the decoders in one value.

    Attributes:
        method: "beam" (beam search), "greedy" or "sample".
        beam_size: hypotheses kept per sentence in beam search (1: greedy search, scores length-penalised).
        length_penalty: alpha of Wu et al. (2016): beam search scores are `log_prob_sum / ((5 + length) / 6) **
            alpha`; 0 ranks by the raw log-probability sum.
        n_best: hypotheses returned per sentence, 1 <= n_best <= beam_size; 1 for greedy search and sampling.
        temperature, top_k, top_p, seed: sampling (method "sample" only; see `sample_decode`): the
            log-probabilities divided by temperature, kept to the top_k best (0: all) and to the nucleus of
            probability top_p; seed None draws a fresh one every call, an int or int scalar tensor repeats.
        no_repeat_ngram_size: N > 0 forbids a token that would complete an N-gram the output already holds
            (fairseq's NGramRepeatBlock); 0: off.
        max_decode_length: the length cap rule, N (at most N output tokens, EOS included; also an int scalar
            tensor) or "Ax+B" (at most floor(A * source length) + B, source length counting the sentence's
            non-padding ids, EOS included; fairseq's max_len_a and max_len_b). Always at most the model's
            max_length.
        min_decode_length: the fewest output tokens (EOS included): EOS is not allowed earlier (as in OpenNMT and
            CTranslate2); never more than a sentence's cap. 0: no minimum.
        average_last: the weights the commands load: None for one checkpoint, N to average the last N.

    Raises:
        ValueError: a bad setting, naming it and the fix (sampling settings without method="sample", n_best
            above beam_size or above 1 without beam search included).

    Example:

    >>> settings = DecodingSettings(beam_size=5, n_best=2, max_decode_length="1.5x+10")
    >>> settings.length_cap
    LengthCap(max_decode_length=None, ratio=1.5, extra=10)
    >>> dataclasses.replace(settings, no_repeat_ngram_size=4).no_repeat_ngram_size  # a changed copy, checked
    4
    """

    method: str = "beam"
    beam_size: int = 4
    length_penalty: float = 0.6
    n_best: int = 1
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: Any = None
    no_repeat_ngram_size: int = 0
    max_decode_length: Any = f"x+{EXTRA_DECODE_LENGTH}"
    min_decode_length: int = 0
    average_last: Optional[int] = None

    def __post_init__(self):
        for field in dataclasses.fields(self):
            _check(field.name, getattr(self, field.name))
        if self.method != "sample":
            changed = [name for name in _SAMPLING if getattr(self, name) != getattr(DecodingSettings, name)]
            if changed:
                raise ValueError(
                    f"{', '.join(changed)}: sampling arguments need method='sample', got method={self.method!r}. "
                    "Fix: pass method='sample', or leave them out."
                )
            if self.method != "beam" and self.n_best != 1:
                raise ValueError(
                    f"n_best: {self.method} decoding gives one hypothesis, got n_best={self.n_best}. "
                    "Fix: use method='beam'."
                )
        if self.n_best > self.beam_size:
            raise ValueError(
                f"n_best: must be an int in [1, beam_size={self.beam_size}], got {self.n_best!r}. "
                "Fix: lower n_best or raise beam_size (the n-best list comes from the beam)."
            )

    @property
    def length_cap(self) -> LengthCap:
        """The length cap rule (`LengthCap`) of `max_decode_length`, which the length plan reads."""
        if _is_tensor(self.max_decode_length):
            return LengthCap(self.max_decode_length, 1.0, EXTRA_DECODE_LENGTH)
        return parse_max_decode_length(self.max_decode_length)

    def json_settings(self) -> Dict[str, Any]:
        """The settings decoding.json holds, as a dict in its key order."""
        return {name: getattr(self, name) for name in JSON_SETTINGS}


# The paper's decoding: the library's defaults.
PAPER = DecodingSettings()
# The commands' and decoding.json's: the paper's with the guards against loops (see the module docstring).
COMMAND_DEFAULTS = dataclasses.replace(PAPER, no_repeat_ngram_size=4, max_decode_length="1.5x+10")
# The length penalties `tune_length_penalty` (tft-evaluate --tune_on) tries: around the paper's and the Multi30k
# recipe's 1.5.
TUNED_LENGTH_PENALTIES = (0.0, 0.3, PAPER.length_penalty, 0.9, 1.2, 1.5, 2.0)
# decoding.json's keys and their defaults (the commands' flags show them).
DEFAULTS: Dict[str, Any] = COMMAND_DEFAULTS.json_settings()


def require_settings(settings) -> DecodingSettings:
    """`settings`, or a TypeError when it is not a `DecodingSettings` (e.g. a dict, or a beam size given where
    the settings go)."""
    if not isinstance(settings, DecodingSettings):
        raise TypeError(
            f"settings: expected a DecodingSettings, got {type(settings).__name__} {settings!r}. Fix: pass e.g. "
            "DecodingSettings(beam_size=4) (tf_transformer.decoding.DecodingSettings)."
        )
    return settings


def check_settings(values: Mapping[str, Any], where: str = "", prefix: str = "") -> Dict[str, Any]:
    """`values` (a subset of decoding.json's keys) checked with `DecodingSettings`' rules; a ValueError that
    names `where` (e.g. the file), the key (after `prefix`: "decode_" for the config's fields, "--" for flags)
    and the fix."""
    where = f"{where}: " if where else ""
    for name, value in values.items():
        if name not in DEFAULTS:
            raise ValueError(f"{where}{name!r} is not a decoding setting. Fix: use {', '.join(DEFAULTS)}.")
        _check(name, value, where, prefix)
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


def recorded_settings(model_dir: PathLike) -> Optional[Dict[str, Any]]:
    """The decoding.json settings the latest start of the model directory's run was given: train_config.json's
    "decoding" record, else (a run of release 0.1) its config.json's `decode_*` fields, defaults for absent ones;
    None when neither file holds them."""
    model_dir = pathlib.Path(model_dir)
    for name in (TRAIN_CONFIG_FILE, CONFIG_FILE):
        try:
            values = json.loads((model_dir / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(values, dict):
            continue
        if name == TRAIN_CONFIG_FILE and isinstance(values.get(DECODING_RECORD), dict):
            return {**DEFAULTS, **values[DECODING_RECORD]}
        if name == CONFIG_FILE and any(field in values for field in CONFIG_FIELDS):
            return {key: values.get(field, DEFAULTS[key]) for field, key in CONFIG_FIELDS.items()}
    return None


def update_decoding_json(model_dir: PathLike, settings: DecodingSettings) -> bool:
    """Writes MODEL_DIR/decoding.json from `settings`, the decoding settings a training run was given, unless the
    file exists and they are what the run's latest start was given (`recorded_settings`): a resumed run keeps a hand
    edit or a tuned length penalty, while a run that changes a setting rewrites it. Call it before train_config.json
    records `settings`, from the chief only. True when it wrote the file."""
    model_dir = pathlib.Path(model_dir)
    values = require_settings(settings).json_settings()
    if (model_dir / DECODING_FILE).is_file() and recorded_settings(model_dir) == values:
        return False
    write_decoding_json(model_dir, values)
    return True


def write_decoding_json(model_dir: PathLike, values: Mapping[str, Any]) -> None:
    """The one writer of MODEL_DIR/decoding.json (tft-train's `update_decoding_json`, tft-evaluate's
    `tune_length_penalty`): `values` checked, written atomically."""
    path = pathlib.Path(model_dir) / DECODING_FILE
    write_atomically(path, json.dumps(check_settings(values, str(path)), indent=2) + "\n")


def resolve_settings(
    given: Mapping[str, Any], model_dir: Optional[PathLike], checkpoint_given: bool = False
) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """`(settings, sources)`: each setting of DEFAULTS from `given` (the flags the user gave: name -> value),
    else from MODEL_DIR/decoding.json, else the default; `sources[name]` says which ("flag", "decoding.json",
    "default"). decoding.json's average_last applies only when neither a checkpoint nor average_last is given
    (`checkpoint_given`: the user chose the weights)."""
    # Every flag checked before anything is read: a one-line error naming the flag.
    check_settings(given, prefix="--")
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


def command_settings(
    given: Mapping[str, Any], model_dir: Optional[PathLike], checkpoint_given: bool = False, **others
) -> Tuple[DecodingSettings, Dict[str, str]]:
    """`(settings, sources)` for a command: `resolve_settings`' values (flag > decoding.json > default) with
    `others` (settings that only flags give, e.g. n_best), as one checked `DecodingSettings`. Reads
    decoding.json only: call it before loading a model, so that a bad setting stops the command at once."""
    values, sources = resolve_settings(given, model_dir, checkpoint_given)
    check_settings({name: value for name, value in others.items() if name in DEFAULTS}, prefix="--")
    return DecodingSettings(**{**values, **others}), sources
