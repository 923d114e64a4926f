"""Scores translations against references with sacrebleu and prints the scores as JSON.

    tft-evaluate --references=test.de --hypotheses=test.hyp.de
    tft-evaluate --references=test_2016_flickr.de.gz --model_dir=runs/multi30k_tiny \
        --sources=test_2016_flickr.en.gz --average_last=5 --beam_size=4

Either scores a file of translations (--hypotheses), or first translates --sources with a model directory
(the decoding flags of tft-translate: --checkpoint (a path, or best) or --average_last, --beam_size,
--length_penalty, --method, --batch_tokens, --max_decode_length; those not given come from the model directory's
decoding.json, as in tft-translate). Files are plain or gzip, one sentence a line,
aligned by line.
Prints {"bleu", "bleu_signature", "chrf", "chrf_signature", "tok_lower_bleu", "sentences", ...}: see
`tf_transformer.evaluation.score_translations` for what each figure is.
"""

import json
import logging as pylogging

from absl import flags

from tf_transformer.cli import _decoding_flags as decoding_flags
from tf_transformer.cli import exit_on, run_binary

_REFERENCES = flags.DEFINE_string("references", None, "Reference translations, one a line.", required=True)
_HYPOTHESES = flags.DEFINE_string("hypotheses", None, "Translations to score, aligned with --references.")
_MODEL_DIR = flags.DEFINE_string("model_dir", None, "Translate --sources with this model directory instead.")
_SOURCES = flags.DEFINE_string("sources", None, "Source sentences to translate (with --model_dir).")


def read_file(path, flag):
    from tf_transformer.data.files import inspect_text_file, read_lines  # not at the top: --help needs no TensorFlow

    inspect_text_file(path, flag)  # a clear error for a missing, empty or non-UTF-8 file
    return list(read_lines(path))


def translate_sources():
    # Imported here: scoring a file of hypotheses needs no model.
    from tf_transformer.decoding.text import translate_texts

    sources = read_file(_SOURCES.value, "--sources")
    decoding = decoding_flags.settings(_MODEL_DIR.value)
    model, tokenizer, _ = decoding_flags.load_model(_MODEL_DIR.value, decoding)
    results = translate_texts(model, tokenizer, sources, **decoding_flags.decoding_arguments(decoding))
    return [hypotheses[0][0] for hypotheses in results]


def main(argv):
    del argv
    pylogging.getLogger("absl").setLevel(pylogging.WARNING)  # TensorFlow's INFO lines; ours stay
    with exit_on(FileNotFoundError, ValueError):  # ConfigError and DataError are ValueErrors
        with_model = _MODEL_DIR.value is not None or _SOURCES.value is not None
        if (_HYPOTHESES.value is not None) == with_model:
            raise ValueError(
                "give either --hypotheses (a file of translations) or --model_dir and --sources (translate them first)."
            )
        if with_model and (_MODEL_DIR.value is None or _SOURCES.value is None):
            raise ValueError("--model_dir and --sources go together: pass both.")
        references = read_file(_REFERENCES.value, "--references")
        hypotheses = read_file(_HYPOTHESES.value, "--hypotheses") if not with_model else translate_sources()
        from tf_transformer.evaluation import score_translations

        scores = score_translations(hypotheses, references)
    print(json.dumps(scores, indent=2))


def run():
    """The `tft-evaluate` command (and tools/evaluate.py in a checkout)."""
    run_binary(__name__, main, decoding_flags.__name__)


if __name__ == "__main__":
    run()
