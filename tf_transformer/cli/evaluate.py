"""Scores translations against references with sacrebleu and prints the scores as JSON.

    tft-translate --model_dir=runs/multi30k --input=../shared/data/multi30k/val.en.gz --output=val.hyp.de
    tft-evaluate --references=../shared/data/multi30k/val.de.gz --hypotheses=val.hyp.de

Either scores a file of translations (--hypotheses), or first translates --sources with a model directory,
e.g. --model_dir=runs/multi30k --sources=../shared/data/multi30k/val.en.gz in place of --hypotheses above
(the decoding flags of tft-translate: --checkpoint (a path, or best) or --average_last, --beam_size,
--length_penalty, --method, --batch_tokens, --max_decode_length, --no_repeat_ngram_size; those not given come
from the model directory's decoding.json, as in tft-translate). Files are plain or gzip, one sentence a line,
aligned by line. --quantize=int8 quantizes the model's weights to int8 in memory first, and --mixed_precision
(auto: mixed_bfloat16 where the CPU computes bf16 natively, else float32) sets the precision it decodes in, as in
tft-translate.
Prints {"bleu", "bleu_signature", "chrf", "chrf_signature", "tok_lower_bleu", "sentences", ...}: see
`tf_transformer.evaluation.score_translations` for what each figure is. --language=de (the target language) adds
"moses_lower_bleu": BLEU on Multi30k's own lowercased, Moses-tokenized text, the figure Multi30k papers report.
--lowercase scores "bleu" and "chrf" on lowercased text, for a model trained with --lowercase (whose translations
are lowercase: cased BLEU would count every capital letter of the references as an error); with --model_dir it is
on when that model lowercases.

    tft-evaluate --model_dir=runs/multi30k --tune_on=val

With --tune_on=val (and --model_dir only) it instead translates the model directory's validation split once per
length penalty of --tune_length_penalties (e.g. 1.0,1.5,2.0; beam search; the weights and beam size as above),
writes the one with the best BLEU into MODEL_DIR/decoding.json (the other settings kept) and prints the BLEU of
each as JSON (`tf_transformer.decoding.tuning.tune_length_penalty`).
"""

import json
import logging as pylogging
import pathlib

from absl import flags

from tf_transformer.cli import _decoding_flags as decoding_flags
from tf_transformer.cli import exit_on, run_binary
from tf_transformer.data.text_files import read_sentences  # no TensorFlow
from tf_transformer.decoding.settings import TUNED_LENGTH_PENALTIES

_REFERENCES = flags.DEFINE_string("references", None, "Reference translations, one a line (needed but with --tune_on).")
_HYPOTHESES = flags.DEFINE_string("hypotheses", None, "Translations to score, aligned with --references.")
_LANGUAGE = flags.DEFINE_string(
    "language", None, "The target language's code (e.g. de): adds moses_lower_bleu, BLEU on Moses-tokenized text."
)
_LOWERCASE = flags.DEFINE_bool(
    "lowercase", None,
    "Score BLEU and chrF on lowercased text, for a model trained with --lowercase (default: with --model_dir, "
    "whether that model lowercases; else no).",
)  # fmt: skip
_MODEL_DIR = flags.DEFINE_string("model_dir", None, "Translate --sources with this model directory instead.")
_SOURCES = flags.DEFINE_string("sources", None, "Source sentences to translate (with --model_dir).")
_TUNE_ON = flags.DEFINE_enum(
    "tune_on", None, ["val"], "Choose the length penalty on the validation split and write it into decoding.json."
)
_TUNE_LENGTH_PENALTIES = flags.DEFINE_list(
    "tune_length_penalties", ",".join(map(str, TUNED_LENGTH_PENALTIES)),
    "The length penalties --tune_on tries (ties: the first).",
)  # fmt: skip


def translate_sources(decoding):
    # Imported here: scoring a file of hypotheses needs no model, and a bad flag no TensorFlow.
    from tf_transformer.decoding.text import translate_texts

    sources = read_sentences(_SOURCES.value, "--sources")
    model, tokenizer, _ = decoding_flags.load_model(_MODEL_DIR.value, decoding)
    results = translate_texts(model, tokenizer, sources, decoding, batch_tokens=decoding_flags.BATCH_TOKENS.value)
    return [hypotheses[0][0] for hypotheses in results]


def tune_flags():
    """--tune_on's flags checked: the length penalties to try."""
    scoring_only = (_REFERENCES, _HYPOTHESES, _SOURCES, _LANGUAGE, _LOWERCASE)
    if _MODEL_DIR.value is None or any(flag.value is not None for flag in scoring_only):
        raise ValueError(
            "--tune_on: give --model_dir and none of --references, --hypotheses, --sources, --language, --lowercase "
            "(the model directory says whether it lowercases)."
        )
    if decoding_flags.METHOD.present or decoding_flags.LENGTH_PENALTY.present:
        raise ValueError(
            "--tune_on: tunes the length penalty of beam search. Fix: leave out --method and --length_penalty."
        )
    try:
        penalties = [float(value) for value in _TUNE_LENGTH_PENALTIES.value]
    except ValueError:
        raise ValueError(
            "--tune_length_penalties: expected numbers such as 1.0,1.5,2.0, got "
            f"{','.join(_TUNE_LENGTH_PENALTIES.value)!r}."
        ) from None
    return penalties


def tune(penalties, decoding):
    """--tune_on=val: the length penalty of `penalties` with the best validation BLEU, written into decoding.json."""
    from tf_transformer.decoding.tuning import tune_length_penalty

    decoding_flags.precision_flag.apply("none")  # the model tune_length_penalty loads computes in it
    return tune_length_penalty(
        _MODEL_DIR.value, penalties, decoding, checkpoint=decoding_flags.CHECKPOINT.value,
        batch_tokens=decoding_flags.BATCH_TOKENS.value,
    )  # fmt: skip


def model_lowercases(model_dir) -> bool:
    """Whether the model directory's vocabulary lowercases (its vocab/tokenizer.json; False without one)."""
    from tf_transformer.data.config import vocabulary_lowercases  # no TensorFlow
    from tf_transformer.model_dir import VOCAB_DIR, VOCAB_RECORD

    record = pathlib.Path(model_dir) / VOCAB_DIR / VOCAB_RECORD
    try:
        return vocabulary_lowercases(json.loads(record.read_text(encoding="utf-8")))
    except (OSError, ValueError, AttributeError):  # no record, or not a JSON object
        return False


def warn_if_cased_scoring_looks_wrong(hypotheses, references) -> None:
    """Scoring a file cased (no --lowercase): a warning when the hypotheses have no capital letter and the
    references have some, as a model trained with --lowercase writes."""
    if not any(line != line.lower() for line in hypotheses) and any(line != line.lower() for line in references):
        pylogging.getLogger("tf_transformer").warning(
            "The hypotheses have no capital letters but the references have: cased BLEU and chrF count each as an "
            "error. Fix: for a model trained with --lowercase, pass --lowercase (tok_lower_bleu is lowercased always)."
        )


def scoring_flags():
    """Scoring's flags checked: (whether a model translates the sources, its decoding settings or None, whether to
    score lowercased: --lowercase, else with --model_dir whether the model lowercases, else None: cased, with a
    warning where the text says otherwise)."""
    check_scoring_flag_values()
    with_model = _MODEL_DIR.value is not None or _SOURCES.value is not None
    decoding = decoding_flags.settings(_MODEL_DIR.value) if with_model else None
    lowercase = _LOWERCASE.value
    if lowercase is None and with_model:  # read here: a bad data_config.json stops the command before TensorFlow
        lowercase = model_lowercases(_MODEL_DIR.value)
    return with_model, decoding, lowercase


def check_scoring_flag_values():
    """Scoring's flags that go together, and the language."""
    if _REFERENCES.value is None:
        raise ValueError("--references: missing. Fix: pass the reference translations (or --tune_on=val).")
    with_model = _MODEL_DIR.value is not None or _SOURCES.value is not None
    if (_HYPOTHESES.value is not None) == with_model:
        raise ValueError(
            "give either --hypotheses (a file of translations) or --model_dir and --sources (translate them first)."
        )
    if with_model and (_MODEL_DIR.value is None or _SOURCES.value is None):
        raise ValueError("--model_dir and --sources go together: pass both.")
    from tf_transformer.evaluation.bleu import check_language  # sacrebleu only, no TensorFlow

    check_language(_LANGUAGE.value)


def check_flags():
    """The flags and the model directory's decoding settings, checked before TensorFlow starts and any file or model
    is read: `tune_flags()` with --tune_on, else `scoring_flags()`."""
    if _TUNE_ON.value is None:
        return scoring_flags()
    return tune_flags(), decoding_flags.settings(_MODEL_DIR.value, method="beam")


def check_flag_values():
    """The flags' own checks (no file read): check_flags runs them first, tests/test_docs.py on documented lines."""
    if _TUNE_ON.value is None:
        check_scoring_flag_values()
    else:
        tune_flags()
    decoding_flags.check_flag_values()


def main(argv, checked):
    """Tunes or scores with `checked`, what `check_flags` returned."""
    del argv
    pylogging.getLogger("absl").setLevel(pylogging.WARNING)  # TensorFlow's INFO lines; ours stay
    with exit_on(FileNotFoundError, ValueError):  # ConfigError and DataError are ValueErrors
        if _TUNE_ON.value is not None:
            print(json.dumps(tune(*checked), indent=2))
            return
        with_model, decoding, lowercase = checked
        references = read_sentences(_REFERENCES.value, "--references")
        hypotheses = translate_sources(decoding) if with_model else read_sentences(_HYPOTHESES.value, "--hypotheses")
        from tf_transformer.evaluation import score_translations

        if lowercase is None:
            warn_if_cased_scoring_looks_wrong(hypotheses, references)
        scores = score_translations(hypotheses, references, language=_LANGUAGE.value, lowercase=bool(lowercase))
    print(json.dumps(scores, indent=2))


def run():
    """The `tft-evaluate` command (its console script and the checkout's wrapper script call it)."""
    # Scoring a file of translations needs no model, so no TensorFlow: it takes as long as sacrebleu.
    run_binary(__name__, main, *decoding_flags.FLAG_MODULES, check_flags=check_flags,
               needs_tensorflow=lambda checked: _HYPOTHESES.value is None)  # fmt: skip


if __name__ == "__main__":
    run()
