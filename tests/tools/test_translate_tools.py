"""tools/average_checkpoints.py, tools/translate.py and tools/evaluate.py as users run them, on a model trained
for 4 steps with tools/train.py (it translates badly: only the plumbing is tested, not the quality)."""

import dataclasses
import gzip
import json
import logging
import os
import pathlib
import re
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.decoding import DecodingSettings

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
DECODING = ["--max_decode_length=8"]  # short outputs keep the untrained model fast
# As a user's shell: TF_CPP_MIN_LOG_LEVEL unset (tests/conftest.py sets it for the test process).
QUIET_ENV = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
# TensorFlow's C++ log: absl's `I0000 00:00:...  file.cc:31] ...` lines and its known start-up notices.
TF_LOG_LINE = re.compile(
    r"^\S+\.cc:\d+\]|^[IWEF]\d{4} .*\.cc:\d+\]|oneDNN custom operations|cuInit|absl::InitializeLog|cpu_feature_guard",
    re.M,
)


# The commands that load a model decode in the precision the CPU computes fastest (--mixed_precision=auto: bf16
# where it computes bf16); here they decode in float32, as the in-process library calls they are compared with.
# test_the_decoding_commands_decode_in_the_precision_asked_for tests the flag.
FLOAT32_TOOLS = ("translate.py", "evaluate.py", "score.py", "plot_attention.py")


def run(tool, *arguments, stdin=None, timeout=300, env=ENV, python_options=()):
    arguments = [str(argument) for argument in arguments]
    chooses_precision = not any(argument.startswith(("--saved_model=", "--mixed_precision=")) for argument in arguments)
    if tool in FLOAT32_TOOLS and chooses_precision:
        arguments.append("--mixed_precision=float32")
    command = [sys.executable, *python_options, str(TOOLS / tool), *arguments]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout, env=env)


def imported_modules(result):
    """The modules a command run with `python_options=("-X", "importtime")` imported (Python lists them on stderr)."""
    return {line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(small_corpus, tmp_path_factory):
    """300 training and 20 validation pairs of the small corpus (less to read and tokenize)."""
    folder = tmp_path_factory.mktemp("short_corpus")
    files = {}
    for name, count in (("train_en", 300), ("train_de", 300), ("valid_en", 20), ("valid_de", 20)):
        lines = small_corpus[name].read_text(encoding="utf-8").splitlines()[:count]
        files[name] = write_lines(folder / name, lines)
    return files


@pytest.fixture(scope="module")
def model_dir(corpus, tmp_path_factory):
    path = tmp_path_factory.mktemp("translate_tools") / "run"
    result = run(
        "train.py", "--config=tiny", "--override=d_model=16", "--override=d_ff=32", "--override=num_heads=2",
        "--override=num_encoder_layers=1", "--override=num_decoder_layers=1",
        "--dataset=files", f"--train_source={corpus['train_en']}", f"--train_target={corpus['train_de']}",
        f"--valid_source={corpus['valid_en']}", f"--valid_target={corpus['valid_de']}", f"--model_dir={path}",
        "--vocab_size=400", "--batch_tokens=512", "--seed=1", "--validation_batches=1",
        "--train_steps=4", "--checkpoint_every=2", "--keep_checkpoints=5", "--bleu_every=2", "--bleu_sentences=4",
        "--time_limit_minutes=60", "--budget_schedule=off",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (path / "checkpoints" / "ckpt-4.index").is_file()
    # --budget_schedule=off with a time limit: the paper's schedule, no plan fitted to the limit.
    saved = json.loads((path / "train_config.json").read_text())
    assert (saved["budget_schedule"], saved["time_limit_minutes"]) == ("off", 60) and saved.get("budget") is None
    assert "Best validation BLEU" in result.stdout
    assert json.loads((path / "best" / "best.json").read_text())["settings"] == {"sentences": 4, "beam_size": 1}
    return path


@pytest.fixture(scope="module")
def averaged(model_dir):
    result = run("average_checkpoints.py", f"--model_dir={model_dir}", "--num_checkpoints=2")
    assert result.returncode == 0, result.stderr[-3000:]
    path = result.stdout.strip()
    assert path == str(model_dir / "averaged" / "ckpt-4")
    assert pathlib.Path(path + ".index").is_file()
    summary = json.loads((model_dir / "averaged" / "averaged_checkpoints.json").read_text())
    assert summary["steps"] == [2, 4]
    return path


@pytest.fixture(scope="module")
def sources(corpus):
    """Eight validation sentences with an empty and a blank line among them."""
    lines = corpus["valid_en"].read_text(encoding="utf-8").splitlines()[:6]
    return lines[:2] + [""] + lines[2:5] + ["   "] + lines[5:]


# `python -c REPORT_START tool.py flags...` runs the tool, then prints on stderr which of JAX and matplotlib
# (installed in the test environment, used by no command) its process imported, whether the cyclic garbage collector
# is on and how many objects its start froze out of the collector's passes.
REPORT_START = """
import atexit, gc, runpy, sys
atexit.register(lambda: print("imported:", sorted({m.split(".")[0] for m in sys.modules} & {"jax", "matplotlib"}),
                              "gc enabled:", gc.isenabled(), "frozen:", gc.get_freeze_count(), file=sys.stderr))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_translate_reads_stdin_keeps_the_lines_and_matches_translate_texts(model_dir, averaged, sources):
    # KERAS_BACKEND=jax, as in a shell set up for training under JAX: the command still runs Keras on TensorFlow,
    # says so, and its start imports neither JAX nor matplotlib (tf_transformer/cli/__init__.py: start_tensorflow),
    # and leaves the garbage collector on with TensorFlow's import frozen out of it.
    result = run("translate.py", f"--model_dir={model_dir}", f"--checkpoint={averaged}", *DECODING,
                 stdin="".join(line + "\n" for line in sources), env={**ENV, "KERAS_BACKEND": "jax"},
                 python_options=("-c", REPORT_START))  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Keras backend: tensorflow, not KERAS_BACKEND=jax" in result.stderr
    [report] = re.findall(r"imported: (\[.*\]) gc enabled: (\w+) frozen: (\d+)", result.stderr)
    assert report[:2] == ("[]", "True") and int(report[2]) > 100_000, report  # TensorFlow and Keras: about 450,000
    assert result.stdout.endswith("\n")
    lines = result.stdout[:-1].split("\n")
    assert len(lines) == len(sources)
    assert lines[2] == "" and lines[6] == ""  # the empty and the blank input lines
    assert all(lines[i] for i in (0, 1, 3, 4, 5, 7))  # 8 tokens of an untrained model: never all empty

    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.decoding.text import translate_texts

    model, tokenizer, _ = load_translation_model(model_dir, checkpoint=averaged)
    in_process = translate_texts(
        model, tokenizer, sources, DecodingSettings(no_repeat_ngram_size=4, max_decode_length=8)
    )  # the default
    assert [hypotheses[0][0] for hypotheses in in_process] == lines


def test_translate_greedy_and_n_best(model_dir, sources, tmp_path):
    source_file = write_lines(tmp_path / "sources.en", sources)
    greedy = run(
        "translate.py", f"--model_dir={model_dir}", "--method=greedy", "--with_alignments", "--alignment_layer=-1",
        *DECODING, stdin=source_file.read_text(),
    )  # fmt: skip
    assert greedy.returncode == 0, greedy.stderr[-3000:]
    assert len(greedy.stdout.splitlines()) == len(sources)
    # `translation ||| i-j ...`: one link per word of the translation, in its order, to a word of the source.
    for source, line in zip(sources, greedy.stdout.splitlines(), strict=True):
        text, links = line.split(" ||| ")
        links = [tuple(map(int, link.split("-"))) for link in links.split()]
        assert [j for _, j in links] == list(range(len(text.split()))), line
        assert all(0 <= i < len(source.split()) for i, _ in links), line
        assert bool(links) == bool(source.strip())  # an empty or blank line: " ||| "

    output = tmp_path / "n_best.txt"
    n_best = run("translate.py", f"--model_dir={model_dir}", "--n_best=2", "--beam_size=3", *DECODING,
                 f"--input={source_file}", f"--output={output}")  # fmt: skip
    assert n_best.returncode == 0, n_best.stderr[-3000:]
    assert n_best.stdout == ""
    assert "100%" in n_best.stderr  # the progress bar, on stderr since the output is a file
    lines = output.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 * len(sources)
    fields = [re.fullmatch(r"(\d+) \|\|\| (.*) \|\|\| (-?\d+\.\d+)", line) for line in lines]
    assert all(fields), lines
    assert [int(match.group(1)) for match in fields] == [i for i in range(len(sources)) for _ in range(2)]
    for first, second in zip(fields[::2], fields[1::2], strict=True):
        assert float(first.group(3)) >= float(second.group(3))  # best first
    assert fields[4].group(2) == "" and fields[5].group(2) == ""  # sentence 2 is empty


def test_evaluate_scores_a_hypothesis_file(corpus, tmp_path):
    references = corpus["valid_de"].read_text(encoding="utf-8").splitlines()[:5]
    hypotheses = write_lines(tmp_path / "hyp.de", [references[0], "", "ein Hund", references[3], "Hallo"])
    reference_file = write_lines(tmp_path / "ref.de", references)
    result = run(
        "evaluate.py",
        f"--references={reference_file}",
        f"--hypotheses={hypotheses}",
        "--language=de",
        python_options=("-X", "importtime"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # Scoring a file needs no model: TensorFlow is not started (a fraction of a second, not several).
    assert "sacrebleu" in imported_modules(result) and "tensorflow" not in imported_modules(result)
    scores = json.loads(result.stdout)
    for key in ("bleu", "bleu_signature", "chrf", "chrf_signature", "tok_lower_bleu", "sentences"):
        assert key in scores
    assert scores["sentences"] == 5
    for key in ("bleu", "chrf", "tok_lower_bleu", "moses_lower_bleu"):
        assert 0 < scores[key] < 100
    assert scores["moses_lower_bleu_signature"].startswith("lc.norm.tok:de|sacremoses:")


def test_evaluate_scores_lowercase_translations_on_lowercased_text_with_lowercase(corpus, model_dir, tmp_path):
    from sacrebleu.metrics import BLEU, CHRF

    references = corpus["valid_de"].read_text(encoding="utf-8").splitlines()[:5]
    lowercased = [references[0].lower(), "ein hund", references[2].lower(), references[3].lower(), "hallo"]
    assert any(line != line.lower() for line in references)
    files = [f"--references={write_lines(tmp_path / 'ref.de', references)}",
             f"--hypotheses={write_lines(tmp_path / 'hyp.de', lowercased)}"]  # fmt: skip
    cased, folded = run("evaluate.py", *files), run("evaluate.py", *files, "--lowercase")
    assert cased.returncode == 0 and folded.returncode == 0, cased.stderr[-3000:] + folded.stderr[-3000:]
    # Without the flag: cased scores, and a warning that names the fix.
    assert json.loads(cased.stdout)["bleu"] == pytest.approx(BLEU().corpus_score(lowercased, [references]).score)
    assert "The hypotheses have no capital letters" in cased.stderr and "pass --lowercase" in cased.stderr
    scores = json.loads(folded.stdout)
    assert scores["bleu"] == pytest.approx(BLEU(lowercase=True).corpus_score(lowercased, [references]).score)
    assert scores["chrf"] == pytest.approx(CHRF(lowercase=True).corpus_score(lowercased, [references]).score)
    assert scores["lowercase"] is True and "no capital letters" not in folded.stderr

    # With --model_dir the model's vocabulary says: one that case-folds (as --lowercase builds it; its record says
    # so) is scored lowercased.
    path = tmp_path / "run"
    shutil.copytree(model_dir, path)
    record = json.loads((path / "vocab" / "tokenizer.json").read_text())
    assert record["normalization"] == "nmt_nfkc"
    (path / "vocab" / "tokenizer.json").write_text(json.dumps({**record, "normalization": "nmt_nfkc_cf"}))
    source_file = write_lines(tmp_path / "src.en", corpus["valid_en"].read_text(encoding="utf-8").splitlines()[:5])
    evaluated = run("evaluate.py", f"--model_dir={path}", f"--sources={source_file}", files[0], *DECODING)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert json.loads(evaluated.stdout)["lowercase"] is True and "|case:lc|" in evaluated.stdout


def test_evaluate_refuses_a_language_name_before_reading_files(tmp_path):
    missing = tmp_path / "missing.de"
    result = run(
        "evaluate.py", f"--references={missing}", f"--hypotheses={missing}", "--language=German",
        python_options=("-X", "importtime"),
    )  # fmt: skip
    assert result.returncode == 1
    assert "language 'German': expected the target language's ISO 639 code" in result.stderr
    assert "Traceback" not in result.stderr and "tensorflow" not in imported_modules(result)


def test_tool_errors_are_one_clear_line(model_dir, tmp_path):
    result = run(
        "average_checkpoints.py", f"--model_dir={model_dir}", "--num_checkpoints=9", python_options=("-X", "importtime")
    )
    assert result.returncode == 1
    assert "error: num_checkpoints" in result.stderr and "has only 2" in result.stderr
    assert "Traceback" not in result.stderr
    assert "tensorflow" not in imported_modules(result)  # refused before TensorFlow starts
    # The decoding commands' --average_last (or decoding.json's): refused as early, naming that setting.
    result = run("translate.py", f"--model_dir={model_dir}", "--average_last=9", stdin="A dog.\n",
                 python_options=("-X", "importtime"))  # fmt: skip
    assert result.returncode == 1
    assert "error: average_last: asked to average the last 9" in result.stderr and "has only 2" in result.stderr
    assert "Fix: average_last=2 or fewer" in result.stderr and "Traceback" not in result.stderr
    assert "tensorflow" not in imported_modules(result)


def test_translate_texts_traces_once_and_keeps_the_input_order(model_dir, sources, caplog):
    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.decoding.text import TextTranslator

    model, tokenizer, config = load_translation_model(model_dir)
    translator = TextTranslator(
        model, tokenizer, DecodingSettings(method="greedy", max_decode_length=6), batch_tokens=200
    )
    sentences = sources + [" ".join(["A dog runs across the green field."] * 30)]
    too_long = sum(len(ids) > config.max_length - 1 for ids in tokenizer.tokenize(sentences).to_list())
    assert too_long >= 1
    progress = []
    with caplog.at_level(logging.WARNING, logger="tf_transformer"):
        results = translator(sentences, progress=lambda done, total: progress.append((done, total)))
    assert f"{too_long} of 9 sentences have more than {config.max_length - 1} tokens" in caplog.text
    assert len(progress) > 2 and progress[-1] == (9, 9)  # several batches of at most 200 source tokens
    # A batch of one sentence decodes it without padding: the batched results are the same, in input order.
    alone = [translator([sentence])[0] for sentence in sources]
    assert [r[0][0] for r in results[:-1]] == [r[0][0] for r in alone]
    assert [r[0][1] for r in results[:-1]] == pytest.approx([r[0][1] for r in alone], abs=1e-4)
    assert results[2] == [("", 0.0)] and results[6] == [("", 0.0)]
    assert translator.decode.experimental_get_tracing_count() == 1  # every batch shape ran the same graph


@pytest.fixture(scope="module")
def tuned(model_dir, tmp_path_factory):
    """A copy of the model directory whose decoding.json (as after a hand edit) asks for beam 2, length penalty
    1.5 and the average of the last 2 checkpoints."""
    # tft-train wrote the tiny config's settings: the paper's.
    paper = {"beam_size": 4, "length_penalty": 0.6, "method": "beam", "average_last": None,
             "no_repeat_ngram_size": 4, "max_decode_length": "1.5x+10"}  # fmt: skip
    assert json.loads((model_dir / "decoding.json").read_text()) == paper
    path = tmp_path_factory.mktemp("tuned") / "run"
    shutil.copytree(model_dir, path)
    settings = {"beam_size": 2, "length_penalty": 1.5, "method": "beam", "average_last": 2}
    (path / "decoding.json").write_text(json.dumps(settings), encoding="utf-8")
    return path


def translated_in_process(model_dir, sources, **settings):
    """What tft-translate --n_best=2 --max_decode_length=8 writes, with `settings`, computed in this process."""
    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.decoding.text import format_results, translate_texts

    decoding = DecodingSettings(n_best=2, no_repeat_ngram_size=4, max_decode_length=8, **settings)
    model, tokenizer, _ = load_translation_model(model_dir, average_last=decoding.average_last)
    results = translate_texts(model, tokenizer, sources, decoding)
    return "".join(line + "\n" for line in format_results(results, scored=True))


# --n_best=2: its scores are length-penalised, so they show the length penalty (and the weights) used.
N_BEST = ["--n_best=2", *DECODING]


@pytest.fixture(scope="module")
def as_decoding_json_says(tuned, sources):
    """translated_in_process with tuned's decoding.json (beam 2, length penalty 1.5, the last 2 averaged): once for
    the tests that compare with it."""
    return translated_in_process(tuned, sources, beam_size=2, length_penalty=1.5, method="beam", average_last=2)


@pytest.fixture(scope="module")
def with_length_penalty_0_6(tuned, sources):
    return translated_in_process(tuned, sources, beam_size=2, length_penalty=0.6, average_last=2)


def n_best_fields(text):
    """`i ||| translation ||| score` lines as (i, translation, score)."""
    fields = [re.fullmatch(r"(\d+) \|\|\| (.*) \|\|\| (-?\d+\.\d+)", line) for line in text.splitlines()]
    assert fields and all(fields), text
    return [(int(match.group(1)), match.group(2), float(match.group(3))) for match in fields]


def test_translate_decodes_as_decoding_json_says_and_quietly(tuned, sources, as_decoding_json_says):
    result = run("translate.py", f"--model_dir={tuned}", *N_BEST, stdin="".join(line + "\n" for line in sources),
                 env=QUIET_ENV)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        "Decoding: beam_size=2 (decoding.json), length_penalty=1.5 (decoding.json), method=beam (decoding.json), "
        "average_last=2 (decoding.json)" in result.stderr
    )
    # TF_CPP_MIN_LOG_LEVEL unset: not one line of TensorFlow's C++ log, and the translations are all there.
    assert not TF_LOG_LINE.search(result.stdout + result.stderr), result.stderr[-3000:]
    assert result.stdout == as_decoding_json_says


def test_a_flag_beats_decoding_json_and_a_set_log_level_lets_tensorflows_log_through(
    tuned, sources, as_decoding_json_says, with_length_penalty_0_6
):
    result = run("translate.py", f"--model_dir={tuned}", "--length_penalty=0.6", *N_BEST,
                 stdin="".join(line + "\n" for line in sources),
                 env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"})  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "beam_size=2 (decoding.json), length_penalty=0.6 (flag)" in result.stderr
    assert result.stdout == with_length_penalty_0_6
    assert result.stdout != as_decoding_json_says
    assert TF_LOG_LINE.search(result.stderr), result.stderr[-3000:]  # the user set the level: nothing hidden


def test_a_quiet_error_is_still_one_clear_line(tmp_path):
    result = run("translate.py", f"--model_dir={tmp_path / 'missing'}", stdin="A dog.\n", env=QUIET_ENV)
    assert result.returncode == 1
    assert f"error: model_dir: {tmp_path / 'missing'} is not a folder" in result.stderr
    assert not TF_LOG_LINE.search(result.stdout + result.stderr), result.stderr[-3000:]


def test_alignments_need_a_model_directory(tmp_path):
    # Refused before the export is read: an export has no alignment signature.
    result = run("translate.py", f"--saved_model={tmp_path}", "--with_alignments", stdin="A dog.\n")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: --with_alignments: ")
    assert "Fix: translate with --model_dir" in result.stderr and "Traceback" not in result.stderr
    result = run("translate.py", f"--model_dir={tmp_path}", "--alignment_layer=1", stdin="A dog.\n")
    assert result.returncode == 1
    assert "error: --alignment_layer: only with --with_alignments. Fix:" in result.stderr


def test_export_takes_its_settings_from_decoding_json(
    tuned, sources, tmp_path, as_decoding_json_says, with_length_penalty_0_6
):
    result = run("export.py", f"--model_dir={tuned}", f"--export_dir={tmp_path / 'exports'}", "--max_decode_length=8")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Decoding: beam_size=2 (decoding.json), length_penalty=1.5 (decoding.json), average_last=2" in result.stderr
    recorded = json.loads((tmp_path / "exports" / "1" / "assets" / "export_config.json").read_text())
    assert (recorded["beam_size"], recorded["length_penalty"], recorded["average_last"]) == (2, 1.5, 2)
    assert "Precision: float32 (as requested)" in result.stderr  # the export's default: docs/serving.md says why
    assert recorded["mixed_precision"] == "float32"

    # And it decodes so: its 2 best (beam 2) are those of the model directory's averaged weights at length
    # penalty 1.5, scores included (length-penalised: 0.6 gives other scores to the same translations).
    from tf_transformer.decoding.text import format_results
    from tf_transformer.export import translate_with_saved_model

    served = translate_with_saved_model(tmp_path / "exports" / "1", sources, n_best=2)
    served = n_best_fields("".join(line + "\n" for line in format_results(served, scored=True)))
    expected, other = n_best_fields(as_decoding_json_says), n_best_fields(with_length_penalty_0_6)
    assert [(i, text) for i, text, _ in served] == [(i, text) for i, text, _ in expected]
    assert [score for *_, score in served] == pytest.approx([score for *_, score in expected], abs=2e-4)
    assert [score for *_, score in served] != pytest.approx([score for *_, score in other], abs=2e-4)


def test_checkpoint_flag_gives_that_checkpoints_weights_not_the_latest(model_dir, corpus, tmp_path):
    """tft-translate, tft-evaluate and tft-export --checkpoint=ckpt-2 use step 2's weights, though step 4's are the
    latest."""
    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.decoding.text import format_results, translate_texts
    from tf_transformer.evaluation.bleu import score_translations

    older = model_dir / "checkpoints" / "ckpt-2"
    sources, references = (corpus[name].read_text(encoding="utf-8").splitlines() for name in ("valid_en", "valid_de"))
    # 20 tokens without repeats: long enough for the 4-step model's two checkpoints to translate some sentences
    # differently (at 8 tokens both repeat one piece), so that the BLEU and chrF of tft-evaluate tell them apart.
    flags = ["--n_best=2", "--max_decode_length=20", "--no_repeat_ngram_size=1"]
    settings = DecodingSettings(n_best=2, max_decode_length=20, no_repeat_ngram_size=1)
    results = {}
    for checkpoint in (older, None):
        model, tokenizer, _ = load_translation_model(model_dir, checkpoint)
        results[checkpoint] = translate_texts(model, tokenizer, sources, settings)
    expected, latest = (
        [(line.rsplit(" ||| ", 1)[0], float(line.rsplit(" ||| ", 1)[1])) for line in format_results(r, scored=True)]
        for r in (results[older], results[None])
    )
    scores = {c: score_translations([h[0][0] for h in results[c]], references) for c in results}
    assert (scores[older]["bleu"], scores[older]["chrf"]) != (scores[None]["bleu"], scores[None]["chrf"])

    translated = run("translate.py", f"--model_dir={model_dir}", f"--checkpoint={older}", *flags,
                     f"--input={corpus['valid_en']}")  # fmt: skip
    assert translated.returncode == 0, translated.stderr[-3000:]
    served = [
        (line.rsplit(" ||| ", 1)[0], float(line.rsplit(" ||| ", 1)[1])) for line in translated.stdout[:-1].split("\n")
    ]
    assert [text for text, _ in served] == [text for text, _ in expected]
    assert [score for _, score in served] == pytest.approx([score for _, score in expected], abs=2e-4)
    assert [score for _, score in served] != pytest.approx([score for _, score in latest], abs=2e-4)

    evaluated = run("evaluate.py", f"--model_dir={model_dir}", f"--checkpoint={older}", *flags[1:],
                    f"--sources={corpus['valid_en']}", f"--references={corpus['valid_de']}")  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    evaluation = json.loads(evaluated.stdout)
    for key in ("bleu", "chrf", "hypothesis_tokens"):
        assert evaluation[key] == pytest.approx(scores[older][key], abs=1e-6), key

    # tft-export: the export's variables are among step 2's (the checkpoint also holds the optimizer's).
    exported = run("export.py", f"--model_dir={model_dir}", f"--checkpoint={older}", f"--export_dir={tmp_path}")
    assert exported.returncode == 0, exported.stderr[-3000:]

    def arrays(path):  # the float32 ones: the weights (and the moments); not the object graph or the step
        reader = tf.train.load_checkpoint(str(path))
        values = (reader.get_tensor(name) for name in reader.get_variable_to_shape_map())
        return {value.tobytes() for value in values if getattr(value, "dtype", None) == np.float32}

    weights = arrays(tmp_path / "1" / "variables" / "variables")
    assert weights <= arrays(older) and not weights <= arrays(model_dir / "checkpoints" / "ckpt-4")


def test_evaluate_tunes_the_length_penalty_on_val_into_decoding_json(model_dir, corpus, tmp_path):
    from sacrebleu.metrics import BLEU

    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.decoding.text import translate_texts

    path = tmp_path / "run"
    shutil.copytree(model_dir, path)
    # no_repeat_ngram_size=1 and 20 tokens: the 4-step model, kept from repeating its favourite piece, ends some
    # hypotheses early, so that length penalties 0 and 10 choose different translations (at 8 tokens with
    # repeats allowed every hypothesis has the longest length, and any length penalty gives the same outputs).
    before = {"beam_size": 2, "length_penalty": 1.5, "method": "beam", "average_last": 2, "no_repeat_ngram_size": 1}
    (path / "decoding.json").write_text(json.dumps(before), encoding="utf-8")
    sources = corpus["valid_en"].read_text(encoding="utf-8").splitlines()
    model, tokenizer, _ = load_translation_model(path, average_last=2)

    def translated(length_penalty):
        settings = DecodingSettings(beam_size=2, length_penalty=length_penalty, max_decode_length=20,
                                    no_repeat_ngram_size=1)  # fmt: skip
        results = translate_texts(model, tokenizer, sources, settings)
        return [hypotheses[0][0] for hypotheses in results]

    outputs = {penalty: translated(penalty) for penalty in (0.0, 10.0)}
    assert sum(a != b for a, b in zip(outputs[0.0], outputs[10.0], strict=True)) >= 3, outputs
    # The validation references: the model's own translations at length penalty 10 (their whitespace made single
    # spaces, so that none holds a line break), so 10, the second candidate, must win over 0.
    references = [" ".join(line.split()) for line in outputs[10.0]]
    write_lines(path / "valid.de", references)
    data_config = json.loads((path / "data_config.json").read_text())
    (path / "data_config.json").write_text(json.dumps({**data_config, "valid_target": str(path / "valid.de")}))
    expected = {str(penalty): BLEU().corpus_score(outputs[penalty], [references]).score for penalty in outputs}
    assert expected["10.0"] > expected["0.0"], expected

    result = run("evaluate.py", f"--model_dir={path}", "--tune_on=val", "--tune_length_penalties=0.0,10.0",
                 "--max_decode_length=20")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "beam_size=2 (decoding.json)" in result.stderr and "average_last=2 (decoding.json)" in result.stderr
    tuned = json.loads(result.stdout)
    bleu = tuned["bleu_by_length_penalty"]
    assert list(bleu) == ["0.0", "10.0"] and tuned["sentences"] == 20  # the 20 validation pairs of the run
    assert bleu == pytest.approx(expected, abs=1e-6)  # each candidate decoded with its own length penalty
    assert tuned["length_penalty"] == 10.0
    # Only the length penalty changes.
    assert json.loads((path / "decoding.json").read_text()) == {**before, "length_penalty": 10.0}

    # A model whose vocabulary lowercases is ranked on lowercased text: against capitalized references (every
    # letter whose capital is one letter) the lowercased scores are those above, and 10 wins again.
    from tf_transformer.decoding.tuning import tune_length_penalty

    capitals = ["".join(c.upper() if len(c.upper()) == 1 else c for c in line) for line in references]
    assert capitals != references
    write_lines(path / "valid.de", capitals)
    (path / "data_config.json").write_text(json.dumps({**data_config, "valid_target": str(path / "valid.de"),
                                                       "lowercase": True}))  # fmt: skip
    (path / "decoding.json").write_text(json.dumps(before), encoding="utf-8")
    settings = DecodingSettings(beam_size=2, average_last=2, max_decode_length=20, no_repeat_ngram_size=1)
    lowercased = tune_length_penalty(path, (0.0, 10.0), settings)
    expected = {str(p): BLEU(lowercase=True).corpus_score(outputs[p], [capitals]).score for p in outputs}
    assert lowercased["bleu_by_length_penalty"] == pytest.approx(expected, abs=1e-6)
    assert lowercased["length_penalty"] == 10.0 and expected["10.0"] > expected["0.0"]


def test_score_writes_a_line_per_pair_and_ranks_the_models_own_translation_first(corpus, tuned, sources, tmp_path):
    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.decoding.scoring import score_texts
    from tf_transformer.decoding.text import translate_texts

    # tuned's decoding.json asks for the average of the last 2 checkpoints: tft-score takes it too.
    model, tokenizer, _ = load_translation_model(tuned, average_last=2)
    translations = translate_texts(model, tokenizer, sources, DecodingSettings(length_penalty=0.0, max_decode_length=8))
    own = [hypotheses[0][0] for hypotheses in translations]
    real = [i for i, sentence in enumerate(sources) if sentence.strip()]  # validation sentences 0 to 5
    # Each real sentence again, with the human translation of the next one. (Another sentence's translation
    # by the model would not do: trained for 4 steps, it gives every sentence the same one.)
    references = corpus["valid_de"].read_text(encoding="utf-8").splitlines()
    other = [references[(k + 1) % len(real)] for k in range(len(real))]
    pair_sources = sources + [sources[i] for i in real]
    pair_targets = own + other
    with gzip.open(tmp_path / "targets.de.gz", "wt", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in pair_targets))
    output = tmp_path / "scores.txt"
    result = run("score.py", f"--model_dir={tuned}", f"--sources={write_lines(tmp_path / 'sources.en', pair_sources)}",
                 f"--targets={tmp_path / 'targets.de.gz'}", f"--output={output}", "--batch_tokens=64")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Scoring with average_last=2 (decoding.json)" in result.stderr
    assert "100%" in result.stderr  # the progress bar, on stderr since the output is a file
    lines = output.read_text(encoding="utf-8").splitlines()
    fields = [re.fullmatch(r"(-?\d+\.\d{6})\t(-?\d+\.\d{6})\t(\d+)", line) for line in lines]
    assert len(lines) == len(pair_sources) and all(fields), lines
    log_probs = [float(match.group(1)) for match in fields]
    counts = [int(match.group(3)) for match in fields]
    for match, log_prob, count in zip(fields, log_probs, counts, strict=True):
        assert float(match.group(2)) == pytest.approx(log_prob / count, abs=2e-6)
    expected = [len(ids) + 1 for ids in tokenizer.tokenize(pair_targets).to_list()]  # the tokens and EOS
    assert counts == expected
    assert counts[2] == 1 and counts[6] == 1  # empty translations of the empty and blank lines: EOS alone
    in_process = score_texts(model, tokenizer, pair_sources, pair_targets)
    assert log_probs == pytest.approx([score.log_prob for score in in_process], abs=1e-4)  # other batches
    # With length penalty 0 beam search reports the log-probability of its translation: tokenized again, the
    # text gets that score. And the model finds its own translation more probable than another's.
    assert [log_probs[i] for i in real] == pytest.approx([translations[i][0][1] for i in real], abs=1e-4)
    for k, i in enumerate(real):
        assert log_probs[i] > log_probs[len(sources) + k], (own[i], other[k])


def test_score_refuses_files_of_different_lengths(model_dir, tmp_path):
    sources = write_lines(tmp_path / "sources.en", ["A dog.", "Two men.", "A cat."])
    targets = write_lines(tmp_path / "targets.de", ["Ein Hund.", "Zwei Männer."])
    result = run(
        "score.py", f"--model_dir={model_dir}", f"--sources={sources}", f"--targets={targets}",
        python_options=("-X", "importtime"),
    )  # fmt: skip
    assert result.returncode == 1
    assert (
        f"error: --sources {sources} has 3 lines but --targets {targets} has 2. Fix: give one target line per "
        "source line" in result.stderr
    )
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert "tensorflow" not in imported_modules(result)  # refused before TensorFlow starts


def test_score_texts_traces_once_keeps_the_input_order_and_cuts_long_sides(model_dir, corpus, sources, caplog):
    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.decoding.scoring import TextScorer

    model, tokenizer, config = load_translation_model(model_dir)
    scorer = TextScorer(model, tokenizer, batch_tokens=60)
    references = corpus["valid_de"].read_text(encoding="utf-8").splitlines()
    targets = [references[0], "", references[1], references[2], "   ", references[3], references[4], ""]
    long_side = " ".join(["A dog runs across the green field."] * 30)
    pair_sources, pair_targets = sources + [long_side, "A dog."], targets + ["Ein Hund.", long_side]
    progress = []
    with caplog.at_level(logging.WARNING, logger="tf_transformer"):
        results = scorer(pair_sources, pair_targets, progress=lambda done, total: progress.append((done, total)))
    limit = config.max_length - 1
    assert f"1 of 10 sources have more than {limit} tokens" in caplog.text
    assert f"1 of 10 targets have more than {limit} tokens" in caplog.text
    assert len(progress) > 2 and progress[-1] == (10, 10)  # several batches of at most 60 positions
    assert results[-1].num_tokens == config.max_length  # the first max_length - 1 tokens and the EOS
    assert [results[i].num_tokens for i in (1, 4, 7)] == [1, 1, 1]  # empty and blank targets: EOS alone
    # A batch of one pair scores it without padding: the batched results are the same, in input order.
    alone = [scorer([source], [target])[0] for source, target in zip(pair_sources, pair_targets, strict=True)]
    assert [result.num_tokens for result in results] == [result.num_tokens for result in alone]
    assert [result.log_prob for result in results] == pytest.approx([result.log_prob for result in alone], abs=1e-4)
    assert len({round(result.log_prob, 3) for result in results}) == len(results)  # 10 different pairs
    assert all(result.log_prob < 0 and result.average == result.log_prob / result.num_tokens for result in results)
    assert scorer.score.experimental_get_tracing_count() == 1  # every batch shape ran the same graph
    with pytest.raises(ValueError, match="2 sources but 1 targets"):
        scorer(["A dog.", "A cat."], ["Ein Hund."])


def test_translate_with_target_prefixes_and_the_guards_as_flags(model_dir, sources, tmp_path):
    source_file = write_lines(tmp_path / "sources.en", sources)
    prefixes = ["Ein Hund", "", "Zwei", "Eine", "", "", "", "Ein Mann", "Kinder"][: len(sources)]
    prefix_file = write_lines(tmp_path / "prefixes.de", prefixes)
    guards = ["--no_repeat_ngram_size=2", "--max_decode_length=0.5x+6"]
    result = run("translate.py", f"--model_dir={model_dir}", f"--input={source_file}", f"--target_prefix={prefix_file}",
                 *guards)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no_repeat_ngram_size=2 (flag), max_decode_length=0.5x+6 (flag)" in result.stderr
    lines = result.stdout.splitlines()
    for source, prefix, line in zip(sources, prefixes, lines, strict=True):
        assert line.startswith(prefix) if source.strip() else line == ""

    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.decoding.text import translate_texts

    model, tokenizer, _ = load_translation_model(model_dir)
    in_process = translate_texts(
        model,
        tokenizer,
        sources,
        DecodingSettings(no_repeat_ngram_size=2, max_decode_length="0.5x+6"),
        target_prefixes=prefixes,
    )
    assert [hypotheses[0][0] for hypotheses in in_process] == lines

    # One clear line for a prefix file of another length and for a bad --max_decode_length.
    short = write_lines(tmp_path / "short.de", prefixes[:2])
    for flag, message in ((f"--target_prefix={short}", f"error: --target_prefix: 2 lines for {len(sources)} input"),
                          ("--max_decode_length=1.5y", "error: --max_decode_length: must be N")):  # fmt: skip
        refused = run(
            "translate.py", f"--model_dir={model_dir}", f"--input={source_file}", flag,
            python_options=("-X", "importtime"),
        )  # fmt: skip
        assert refused.returncode == 1 and message in refused.stderr, refused.stderr[-3000:]
        assert "Fix:" in refused.stderr and "Traceback" not in refused.stderr
        assert "tensorflow" not in imported_modules(refused)  # refused before TensorFlow starts


def test_train_lowercase_makes_a_model_that_folds_case_in_and_writes_lowercase_out(corpus, sources, tmp_path):
    path = tmp_path / "lowercase"
    result = run(
        "train.py", "--config=tiny", "--override=d_model=16", "--override=d_ff=32", "--override=num_heads=2",
        "--override=num_encoder_layers=1", "--override=num_decoder_layers=1",
        "--dataset=files", f"--train_source={corpus['train_en']}", f"--train_target={corpus['train_de']}",
        f"--valid_source={corpus['valid_en']}", f"--valid_target={corpus['valid_de']}", f"--model_dir={path}",
        "--vocab_size=400", "--batch_tokens=512", "--seed=1", "--validation_batches=1", "--train_steps=2",
        "--lowercase", "--bleu_every=2", "--bleu_sentences=4", "--mixed_precision=float32",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((path / "data_config.json").read_text())["lowercase"] is True
    # Its validation BLEU and chrF are on lowercased text: the model's greedy translations (as the trainer makes
    # them, here in float32 as the run) scored so (best.json's signatures say case:lc; cased, they say case:mixed).
    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.decoding.text import TextTranslator
    from tf_transformer.evaluation.bleu import score_translations

    model, tokenizer, _ = load_translation_model(path)
    pairs = [corpus[name].read_text(encoding="utf-8").splitlines()[:4] for name in ("valid_en", "valid_de")]
    hypotheses = [best[0][0] for best in TextTranslator(model, tokenizer, DecodingSettings(method="greedy"))(pairs[0])]
    folded = score_translations(hypotheses, pairs[1], lowercase=True)
    best = json.loads((path / "best" / "best.json").read_text())
    assert "|case:lc|" in best["bleu_signature"] and "|case:lc|" in best["chrf_signature"] and best["step"] == 2
    assert (best["bleu"], best["chrf"]) == pytest.approx((folded["bleu"], folded["chrf"]), abs=1e-4)
    cased = [line for line in sources if line.strip()]
    assert any(line != line.lower() for line in cased)  # the test has capitals to fold
    # One call: the sentences as they are, lowercased, and uppercased.
    lines = cased + [line.lower() for line in cased] + [line.upper() for line in cased]
    translated = run("translate.py", f"--model_dir={path}", "--method=greedy", *DECODING, stdin="\n".join(lines) + "\n")
    assert translated.returncode == 0, translated.stderr[-3000:]
    outputs = translated.stdout.splitlines()
    assert len(outputs) == len(lines)
    # The model folds its input (so the case of the source cannot change the translation) and writes lowercase.
    count = len(cased)
    assert outputs[:count] == outputs[count : 2 * count] == outputs[2 * count :]
    assert all(line == line.lower() for line in outputs)
    # Trained for 2 steps it gives every sentence the same translation, so the above would hold without the folding
    # too. Log-probabilities do differ from source to source: a sentence scores the same target equally as it is,
    # lowercased and uppercased, and another sentence scores it otherwise.
    targets = corpus["valid_de"].read_text(encoding="utf-8").splitlines()[:count]
    others = cased[1:] + cased[:1]
    source_file = write_lines(tmp_path / "pairs.en", lines + others)
    target_file = write_lines(tmp_path / "pairs.de", targets * 4)
    scored = run("score.py", f"--model_dir={path}", f"--sources={source_file}", f"--targets={target_file}")
    assert scored.returncode == 0, scored.stderr[-3000:]
    log_probs = [float(line.split("\t")[0]) for line in scored.stdout.splitlines()]
    assert len(log_probs) == 4 * count, scored.stdout
    as_is, lowered, uppered, other = (log_probs[k * count : (k + 1) * count] for k in range(4))
    assert lowered == pytest.approx(as_is, abs=1e-4) and uppered == pytest.approx(as_is, abs=1e-4)
    assert all(abs(a - b) > 1e-3 for a, b in zip(as_is, other, strict=True)), (as_is, other)


def test_translate_and_evaluate_quantize_to_int8_as_in_process(model_dir, corpus, sources, tmp_path):
    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.decoding.text import format_results, translate_texts
    from tf_transformer.evaluation.bleu import score_translations
    from tf_transformer.quantization import quantize_model

    model, tokenizer, _ = load_translation_model(model_dir)
    # tft-translate's, as decoding.json says
    settings = DecodingSettings(n_best=2, max_decode_length=8, no_repeat_ngram_size=4)

    def decoded(model):
        return translate_texts(model, tokenizer, sources, settings)

    float32 = decoded(model)
    int8 = decoded(quantize_model(model, "int8"))
    result = run("translate.py", f"--model_dir={model_dir}", "--quantize=int8", *N_BEST,
                 stdin="".join(line + "\n" for line in sources))  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    served = n_best_fields(result.stdout)
    expected = n_best_fields("".join(line + "\n" for line in format_results(int8, scored=True)))
    unquantized = n_best_fields("".join(line + "\n" for line in format_results(float32, scored=True)))
    assert [(i, text) for i, text, _ in served] == [(i, text) for i, text, _ in expected]
    assert [score for *_, score in served] == pytest.approx([score for *_, score in expected], abs=2e-4)
    # The int8 weights give other scores than the float32 ones (so the flag was not ignored).
    assert [score for *_, score in served] != pytest.approx([score for *_, score in unquantized], abs=2e-4)

    # tft-evaluate --model_dir --quantize=int8: its BLEU and token counts are those of the int8 translations.
    real = [sentence for sentence in sources if sentence.strip()]
    references = corpus["valid_de"].read_text(encoding="utf-8").splitlines()[: len(real)]
    evaluated = run("evaluate.py", f"--model_dir={model_dir}", "--quantize=int8", *DECODING,
                    f"--sources={write_lines(tmp_path / 'sources.en', real)}",
                    f"--references={write_lines(tmp_path / 'references.de', references)}")  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    scores = json.loads(evaluated.stdout)
    settings = dataclasses.replace(settings, n_best=1)
    quantized = quantize_model(load_translation_model(model_dir)[0], "int8")
    hypotheses = [hypotheses[0][0] for hypotheses in translate_texts(quantized, tokenizer, real, settings)]
    expected = score_translations(hypotheses, references)
    assert scores["sentences"] == len(real)
    for key in ("bleu", "chrf", "hypothesis_tokens", "reference_tokens"):
        assert scores[key] == pytest.approx(expected[key], abs=1e-6), key


def test_train_fine_tunes_from_a_model_dir_with_the_budget_schedule_on(model_dir, corpus, tmp_path):
    # --init_from: the source's config, vocabulary and weights, a fresh optimizer; --budget_schedule=on without a
    # time limit: the learning rate decays to zero at train_steps.
    path = tmp_path / "fine_tuned"
    result = run(
        "train.py", f"--init_from={model_dir}", f"--model_dir={path}", "--dataset=files",
        f"--train_source={corpus['train_en']}", f"--train_target={corpus['train_de']}", "--batch_tokens=512",
        "--seed=2", "--train_steps=2", "--checkpoint_every=1", "--keep_checkpoints=5", "--budget_schedule=on",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    for name in ("spm.model", "spm.vocab", "tokenizer.json"):  # the source's vocabulary, as it is
        assert (path / "vocab" / name).read_bytes() == (model_dir / "vocab" / name).read_bytes(), name
    saved = json.loads((path / "train_config.json").read_text())
    record = saved["initialized_from"]
    assert pathlib.Path(record["model_dir"]).resolve() == model_dir.resolve() and record["step"] == 4, record
    assert record["checkpoint"].endswith("ckpt-4"), record
    # Its step counts from 0, and its weights are the source's moved by one update of a warming-up learning rate
    # (a model started afresh, here from another seed than the source's, is nowhere near them).
    from tf_transformer.checkpoints import load_translation_model

    reader = tf.train.load_checkpoint(str(path / "checkpoints" / "ckpt-1"))
    assert int(reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE")) == 1
    source = load_translation_model(model_dir, checkpoint=model_dir / "checkpoints" / "ckpt-4")[0]
    tuned = load_translation_model(path, checkpoint=path / "checkpoints" / "ckpt-1")[0]
    assert len(source.trainable_variables) == len(tuned.trainable_variables) > 10
    moved = [
        np.abs(after.numpy() - before.numpy()).max()
        for before, after in zip(source.trainable_variables, tuned.trainable_variables, strict=True)
    ]
    assert max(moved) < 0.01 and max(moved) > 0, moved
    # The budget schedule: a plan that ends at train_steps, its decay over the last step.
    plan = saved["budget"]
    assert saved["budget_schedule"] == "on" and saved["time_limit_minutes"] is None
    assert (plan["time_limit_minutes"], plan["segment_start"], plan["end_step"], plan["decay_start"]) == (None, 0, 2, 1)
    assert (path / "checkpoints" / "ckpt-2.index").is_file()


def test_the_decoding_commands_decode_in_the_precision_asked_for(model_dir, sources, tmp_path):
    # --mixed_precision in tft-translate, tft-score, tft-evaluate and tft-export: each says so in one line, and
    # mixed_bfloat16 computes what the library computes with a model loaded under that policy.
    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.decoding.scoring import score_texts
    from tf_transformer.decoding.text import format_results, translate_texts
    from tf_transformer.export import translate_with_saved_model
    from tf_transformer.training.precision import resolve_precision

    previous = keras.config.dtype_policy()
    in_process = {}
    for policy in ("float32", "mixed_bfloat16"):
        keras.config.set_dtype_policy(policy)
        try:
            in_process[policy] = load_translation_model(model_dir)[:2]
        finally:
            keras.config.set_dtype_policy(previous)
    settings = DecodingSettings(n_best=2, max_decode_length=8, no_repeat_ngram_size=4)  # as decoding.json says

    def translated(policy):
        results = translate_texts(*in_process[policy], sources, settings)
        return n_best_fields("".join(line + "\n" for line in format_results(results, scored=True)))

    expected = {policy: translated(policy) for policy in in_process}
    assert expected["mixed_bfloat16"] != expected["float32"]  # the scores at least: bf16 computes otherwise
    stdin = "".join(line + "\n" for line in sources)
    result = run("translate.py", f"--model_dir={model_dir}", "--mixed_precision=mixed_bfloat16", *N_BEST, stdin=stdin)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Precision: mixed_bfloat16 (as requested)" in result.stderr
    served = n_best_fields(result.stdout)
    assert [(i, text) for i, text, _ in served] == [(i, text) for i, text, _ in expected["mixed_bfloat16"]]
    bf16_scores = [score for *_, score in expected["mixed_bfloat16"]]
    assert [score for *_, score in served] == pytest.approx(bf16_scores, abs=2e-4)

    pairs = [sentence for sentence in sources if sentence.strip()]
    pair_file = write_lines(tmp_path / "pairs.en", pairs)
    scored = run("score.py", f"--model_dir={model_dir}", f"--sources={pair_file}", f"--targets={pair_file}",
                 "--mixed_precision=mixed_bfloat16")  # fmt: skip
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert "Precision: mixed_bfloat16 (as requested)" in scored.stderr
    log_probs = [float(line.split("\t")[0]) for line in scored.stdout.splitlines()]
    expected_scores = score_texts(*in_process["mixed_bfloat16"], pairs, pairs)
    assert log_probs == pytest.approx([score.log_prob for score in expected_scores], abs=1e-4)

    # auto: what training's resolve_precision gives this machine (bf16 where the CPU computes it), with its reason.
    auto, why = resolve_precision("auto")
    evaluated = run("evaluate.py", f"--model_dir={model_dir}", f"--sources={pair_file}", f"--references={pair_file}",
                    "--mixed_precision=auto", *DECODING)  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert f"Precision: {auto} ({why})" in evaluated.stderr

    # A bf16 export translates as the bf16 model in process, and says so in export_config.json.
    exported = run("export.py", f"--model_dir={model_dir}", f"--export_dir={tmp_path / 'exports'}",
                   "--mixed_precision=mixed_bfloat16", "--max_decode_length=8", "--n_best=2")  # fmt: skip
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert "Precision: mixed_bfloat16 (as requested)" in exported.stderr
    recorded = json.loads((tmp_path / "exports" / "1" / "assets" / "export_config.json").read_text())
    assert recorded["mixed_precision"] == "mixed_bfloat16"
    served = translate_with_saved_model(tmp_path / "exports" / "1", sources, n_best=2)
    served = n_best_fields("".join(line + "\n" for line in format_results(served, scored=True)))
    assert [(i, text) for i, text, _ in served] == [(i, text) for i, text, _ in expected["mixed_bfloat16"]]
