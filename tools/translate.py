"""Translates text, one sentence a line, with a trained model directory.

    python tools/translate.py --model_dir=runs/multi30k_tiny < test.en > test.hyp.de
    python tools/translate.py --model_dir=runs/multi30k_tiny --average_last=5 \
        --input=test.en.gz --output=test.hyp.de --beam_size=4 --length_penalty=0.6

Reads --input (plain or gzip; default stdin) and writes one translation a line, in input order, to --output
(default stdout); an empty or blank input line gives an empty output line. With --n_best=N (N > 1, beam
search) it writes N lines a sentence, best first, as `i ||| translation ||| score`: i is the 0-based input
line number and score the length-penalised log-probability. A progress bar goes to stderr when --output is
a file.

Weights: the latest checkpoint of --model_dir/checkpoints; --checkpoint=PATH for another (a prefix such as
.../checkpoints/ckpt-60, or the path tools/average_checkpoints.py printed); --checkpoint=best for the best
checkpoint by validation BLEU (training with --bleu_every keeps it in MODEL_DIR/best); --average_last=N to
average the last N checkpoints on the fly (nothing is written). Decoding happens in
`tf_transformer.decoding.text.translate_texts`. Translating with an exported SavedModel (--saved_model) is not
supported yet.
"""

import logging as pylogging
import sys

from absl import app, flags

from tf_transformer.checkpoints import load_translation_model
from tf_transformer.data.files import inspect_text_file, read_lines
from tf_transformer.decoding import METHODS
from tf_transformer.decoding.text import translate_texts
from tf_transformer.files import write_atomically

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "A model directory written by tools/train.py.", required=True)
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "A checkpoint path prefix, or best (default: the latest).")
_AVERAGE_LAST = flags.DEFINE_integer("average_last", None, "Average the last N checkpoints in memory.")
_INPUT = flags.DEFINE_string("input", None, "Source sentences, one a line, plain or gzip (default: stdin).")
_OUTPUT = flags.DEFINE_string("output", None, "Where to write the translations (default: stdout).")
_BEAM_SIZE = flags.DEFINE_integer("beam_size", 4, "Beam width (the paper: 4).")
_LENGTH_PENALTY = flags.DEFINE_float("length_penalty", 0.6, "Length penalty alpha (the paper: 0.6).")
_N_BEST = flags.DEFINE_integer("n_best", 1, "Hypotheses per sentence; > 1 writes `i ||| text ||| score` lines.")
_METHOD = flags.DEFINE_enum("method", "beam", list(METHODS), "Decoding method.")
_BATCH_TOKENS = flags.DEFINE_integer("batch_tokens", 4096, "Source tokens per batch (padding included).")
_MAX_DECODE_LENGTH = flags.DEFINE_integer(
    "max_decode_length", None, "Most output tokens a sentence (default: its source length + 50)."
)


def read_input(path):
    """The lines of `path` (plain or gzip), or of stdin without a path."""
    if path is None:
        text = sys.stdin.buffer.read().decode("utf-8")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        lines = [line.rstrip("\r") for line in lines]
        if lines and lines[0].startswith("\ufeff"):
            lines[0] = lines[0][1:]
        return lines
    inspect_text_file(path, "--input")  # a clear error for a missing, empty or non-UTF-8 file
    return list(read_lines(path))


def format_results(results, n_best):
    """Output lines: one translation a sentence, or `i ||| text ||| score` lines for n_best > 1."""
    if n_best == 1:
        return [hypotheses[0][0] for hypotheses in results]
    return [f"{i} ||| {text} ||| {score:.6f}" for i, hypotheses in enumerate(results) for text, score in hypotheses]


def main(argv):
    del argv
    pylogging.getLogger("absl").setLevel(pylogging.WARNING)  # TensorFlow's INFO lines; ours stay
    try:
        if _CHECKPOINT.value is not None and _AVERAGE_LAST.value is not None:
            raise ValueError("--checkpoint and --average_last: give one of them.")
        sentences = read_input(_INPUT.value)
        model, tokenizer, _ = load_translation_model(
            _MODEL_DIR.value, _CHECKPOINT.value, average_last=_AVERAGE_LAST.value
        )
        bar = None
        if _OUTPUT.value is not None:
            import tqdm

            bar = tqdm.tqdm(total=len(sentences), unit="sentence", file=sys.stderr)
        results = translate_texts(
            model, tokenizer, sentences, beam_size=_BEAM_SIZE.value, length_penalty=_LENGTH_PENALTY.value,
            n_best=_N_BEST.value, method=_METHOD.value, batch_tokens=_BATCH_TOKENS.value,
            max_decode_length=_MAX_DECODE_LENGTH.value,
            progress=(lambda done, total: bar.update(done - bar.n)) if bar is not None else None,
        )  # fmt: skip
        if bar is not None:
            bar.close()
    except (FileNotFoundError, ValueError) as error:  # ConfigError and DataError are ValueErrors
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    text = "".join(line + "\n" for line in format_results(results, _N_BEST.value))
    if _OUTPUT.value is None:
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
    else:
        write_atomically(_OUTPUT.value, text)


if __name__ == "__main__":
    app.run(main)
