"""The export as users meet it, outside this process: a model trained with tools/train.py under MirroredStrategy
and exported with tools/export.py; loaded in a fresh process that imports only tensorflow and tensorflow_text;
`saved_model_cli show --all`; tools/translate.py --saved_model. The subprocesses were started by the `checks`
fixture as soon as the export existed; these tests wait for them (so they come last)."""

import copy
import json
import re

from tf_transformer.decoding.text import format_results


def as_text(sentence):
    return sentence.decode("utf-8", errors="replace") if isinstance(sentence, bytes) else sentence


def test_a_model_trained_under_mirrored_strategy_is_what_was_exported(mirrored_training, export_path):
    model_dir, stdout = mirrored_training
    assert "(2 replica(s))" in stdout  # 2 logical CPU devices, one replica each
    assert json.loads((model_dir / "train_config.json").read_text())["strategy"] == "mirrored"
    written = json.loads((export_path / "assets" / "export_config.json").read_text())
    assert written["model_dir"] == str(model_dir.resolve())


def test_a_fresh_process_with_only_tensorflow_gets_exactly_the_in_process_translations(
    checks, translator, served_batch
):
    result = checks.fresh.result()
    assert result.returncode == 0, result.stderr[-3000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    assert served["ours"] == []  # nothing of tf_transformer at serving time
    assert served["dtypes"] == ["string", "float32"]
    assert served["empty_shapes"] == [[0], [0]]

    expected = translator([as_text(sentence) for sentence in served_batch])
    assert served["outputs"] == [hypotheses[0][0] for hypotheses in expected]
    assert served["scores"] == [hypotheses[0][1] for hypotheses in expected]  # exactly: same graph, same batch
    assert served["outputs"][1] == served["outputs"][3] == "" and served["scores"][1] == served["scores"][3] == 0.0
    assert served["outputs"][5] == served["outputs"][6] and any(served["outputs"])


def test_saved_model_cli_lists_serving_default_with_a_string_input(checks):
    result = checks.cli.result()
    assert result.returncode == 0, result.stderr[-3000:]
    signatures = dict(re.findall(r"signature_def\['(\w+)'\]:\n(.*?)Method name is", result.stdout, re.S))
    assert {"serving_default", "translate_nbest", "translate_ids"} <= set(signatures)
    serving = signatures["serving_default"]
    assert re.search(r"inputs\['inputs'\] tensor_info:\s+dtype: DT_STRING\s+shape: \(-1\)", serving)
    assert re.search(r"outputs\['outputs'\] tensor_info:\s+dtype: DT_STRING\s+shape: \(-1\)", serving)
    assert re.search(r"outputs\['scores'\] tensor_info:\s+dtype: DT_FLOAT\s+shape: \(-1\)", serving)
    assert re.search(r"inputs\['source_ids'\] tensor_info:\s+dtype: DT_INT32", signatures["translate_ids"])
    assert "SentencepieceTokenizeOp" in result.stdout  # the op list (top-level functions; see test_module)


def test_translate_tool_with_saved_model_writes_what_the_model_directory_gives(
    checks, n_best_translator, trained, sentences, settings
):
    result = checks.translate.result()
    assert result.returncode == 0, result.stderr[-3000:]
    assert "100%" in result.stderr  # the progress bar
    _, tokenizer, config = trained
    too_long = sum(len(ids) > config.max_length - 1 for ids in tokenizer.tokenize(sentences).to_list())
    assert f"{too_long} of 9 sentences have more than {config.max_length - 1} tokens" in result.stderr
    # Batched as TextTranslator batches (several batches of at most TOOL_BATCH_TOKENS source tokens here).
    small_batches = copy.copy(n_best_translator)  # the same traced decoder
    small_batches.batch_tokens = settings.TOOL_BATCH_TOKENS
    expected = small_batches(sentences)
    lines = checks.translate_output.read_text(encoding="utf-8").splitlines()
    assert lines == format_results(expected, scored=True)
