"""The export loaded in this process: TensorFlow Serving's layout and the resolved configs, warmup records that
run, the defined input behaviour of every signature (equal to the in-process decoding), refusals."""

import json

import numpy as np
import pytest
import tensorflow as tf

import tf_transformer as tft
from tf_transformer.decoding import DecodingSettings
from tf_transformer.export import (
    EXPORT_CONFIG_FILE,
    WARMUP_FILE,
    SavedModelTranslator,
    export_saved_model,
    next_version,
)
from tf_transformer.export.exporter import FALLBACK_WARMUP_SENTENCES, warmup_sentences


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def as_text(sentence):
    """What the in-process path is given for a sentence: a str (invalid bytes replaced as the export does)."""
    return sentence.decode("utf-8", errors="replace") if isinstance(sentence, bytes) else sentence


def test_the_export_has_tensorflow_servings_layout_and_the_resolved_configs(
    export_path, export_dir, model_dir, settings
):
    assert sorted(path.name for path in export_dir.iterdir()) == ["1"]  # no staging folder left behind
    for name in ("saved_model.pb", "variables/variables.index", WARMUP_FILE, "assets/spm.model"):
        assert (export_path / name).is_file(), name
    config = tft.TransformerConfig.from_json(export_path / "assets" / "config.json")
    assert config == tft.TransformerConfig.from_json(model_dir / "config.json")
    written = json.loads((export_path / "assets" / EXPORT_CONFIG_FILE).read_text())
    assert {key: written[key] for key in (*settings.DECODING, "n_best", "version", "max_source_tokens")} == {
        **settings.DECODING, "n_best": settings.N_BEST, "version": 1, "max_source_tokens": config.max_length - 1
    }  # fmt: skip
    assert written["checkpoint"].endswith("ckpt-2") and written["tensorflow_version"] == tf.__version__


def test_the_graph_uses_only_tensorflow_core_and_tensorflow_text_ops(export_path):
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel.FromString((export_path / "saved_model.pb").read_bytes())
    graph = saved_model.meta_graphs[0].graph_def
    ops = {node.op for node in graph.node}
    ops |= {node.op for function in graph.library.function for node in function.node_def}
    assert {"SentencepieceTokenizeOp", "SentencepieceDetokenizeOp", "While", "UnicodeTranscode"} <= ops
    assert not ops & {"PyFunc", "PyFuncStateless", "EagerPyFunc"}
    not_core = {op for op in ops if not hasattr(tf.raw_ops, op)}
    assert not_core == {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp"}


def test_every_text_signature_translates_a_mixed_batch_as_the_in_process_decoder(
    loaded, translator, n_best_translator, served_batch, settings
):
    expected = translator([as_text(sentence) for sentence in served_batch])
    result = loaded.signatures["serving_default"](inputs=tf.constant(served_batch))
    assert [text.decode("utf-8") for text in result["outputs"].numpy()] == [h[0][0] for h in expected]
    assert result["scores"].numpy().tolist() == [h[0][1] for h in expected]

    expected = n_best_translator([as_text(sentence) for sentence in served_batch])
    result = loaded.signatures["translate_nbest"](inputs=tf.constant(served_batch))
    assert result["outputs"].shape.as_list() == [len(served_batch), settings.N_BEST]
    texts = [[text.decode("utf-8") for text in row] for row in result["outputs"].numpy()]
    assert texts == [[text for text, _ in hypotheses] for hypotheses in expected]
    assert result["scores"].numpy().tolist() == [[score for _, score in hypotheses] for hypotheses in expected]
    assert (np.diff(result["scores"].numpy()[[0, 2, 4]], axis=1) <= 0).all()  # best first


def test_defined_input_behaviour(loaded, trained, sentences, settings):
    serve, nbest = loaded.signatures["serving_default"], loaded.signatures["translate_nbest"]
    # An empty batch: empty outputs of the right types and shapes.
    for signature, shape in ((serve, [0]), (nbest, [0, settings.N_BEST])):
        result = signature(inputs=tf.constant([], tf.string))
        assert result["outputs"].shape.as_list() == shape and result["outputs"].dtype == tf.string
        assert result["scores"].shape.as_list() == shape and result["scores"].dtype == tf.float32
    # Only empty or blank sentences: nothing is decoded, every translation is "" with score 0.0.
    result = nbest(inputs=tf.constant(["", " ", "\t"]))
    assert result["outputs"].numpy().tolist() == [[b""] * settings.N_BEST] * 3
    assert result["scores"].numpy().tolist() == [[0.0] * settings.N_BEST] * 3

    # Too long: translated from its first max_length - 1 tokens (translate_ids gets exactly those).
    _, tokenizer, config = trained
    long_tokens = tokenizer.tokenize(sentences[4]).numpy()
    assert len(long_tokens) > config.max_length - 1
    long = serve(inputs=tf.constant([sentences[4]]))
    first = loaded.signatures["translate_ids"](source_ids=tf.constant([long_tokens[: config.max_length - 1]]))
    assert long["outputs"].numpy()[0] == tokenizer.detokenize(first["output_ids"]).numpy()[0]
    assert long["scores"].numpy().tolist() == first["scores"].numpy().tolist()

    # Not UTF-8: each invalid byte sequence becomes U+FFFD; the outputs are valid UTF-8.
    bad = serve(inputs=tf.constant([settings.INVALID_UTF8]))
    replaced = serve(inputs=tf.constant([as_text(settings.INVALID_UTF8).encode("utf-8")]))
    assert bad["outputs"].numpy().tolist() == replaced["outputs"].numpy().tolist()
    assert bad["scores"].numpy().tolist() == replaced["scores"].numpy().tolist()
    bad["outputs"].numpy()[0].decode("utf-8")  # strict: raises if not UTF-8


def test_translate_ids_takes_token_ids_padded_or_ending_with_eos(loaded, translator, trained, sentences):
    _, tokenizer, config = trained
    tokens = tokenizer.tokenize(sentences[:3]).to_list()  # the second sentence is empty
    source_ids = np.zeros((4, max(len(row) for row in tokens) + 3), np.int32)
    for row, ids in enumerate(tokens):
        source_ids[row, : len(ids)] = ids
    source_ids[3, : len(tokens[0]) + 2] = tokens[0] + [config.eos_id, 7]  # ids after an EOS are ignored
    result = loaded.signatures["translate_ids"](source_ids=tf.constant(source_ids))
    expected = translator(sentences[:3] + sentences[:1])
    texts = tokenizer.detokenize(result["output_ids"]).numpy()
    assert [text.decode("utf-8") for text in texts] == [hypotheses[0][0] for hypotheses in expected]
    assert result["scores"].numpy().tolist() == [hypotheses[0][1] for hypotheses in expected]
    assert not result["output_ids"].numpy()[1].any()  # no tokens in, no tokens out

    with pytest.raises(tf.errors.InvalidArgumentError, match="source_ids: ids must be < vocab_size"):
        loaded.signatures["translate_ids"](source_ids=tf.constant([[5, config.vocab_size]], tf.int32))


def test_warmup_records_are_prediction_logs_that_run_against_the_signatures(export_path, loaded):
    from tensorflow_serving.apis import prediction_log_pb2

    records = [record.numpy() for record in tf.data.TFRecordDataset(str(export_path / WARMUP_FILE))]
    logs = [prediction_log_pb2.PredictionLog.FromString(record) for record in records]
    assert 1 <= len(logs) <= 10
    first = tf.make_ndarray(logs[0].predict_log.request.inputs["inputs"])
    assert first.tolist() == [FALLBACK_WARMUP_SENTENCES[0].encode("utf-8")]  # the model dir has no validation file
    called = set()
    for log in logs:
        request = log.predict_log.request
        signature = loaded.signatures[request.model_spec.signature_name]
        outputs = signature(**{name: tf.constant(tf.make_ndarray(proto)) for name, proto in request.inputs.items()})
        batch = next(iter(request.inputs.values())).tensor_shape.dim[0].size
        assert batch > 0 and all(output.shape[0] == batch for output in outputs.values())
        called.add(request.model_spec.signature_name)
    assert called == {"serving_default", "translate_nbest", "translate_ids"}


def test_warmup_sentences_come_from_a_local_validation_file(tmp_path, export_corpus):
    from tf_transformer.data import DataConfig

    validation = export_corpus["valid_en"].read_text(encoding="utf-8").splitlines()
    valid_source = write_lines(tmp_path / "valid.en", validation)
    DataConfig(
        dataset="files",
        train_source=str(export_corpus["train_en"]),
        train_target=str(export_corpus["train_de"]),
        valid_source=str(valid_source),
        valid_target=str(export_corpus["valid_de"]),
    ).to_json(tmp_path / "data_config.json")
    assert warmup_sentences(tmp_path) == validation[:3]
    valid_source.unlink()  # moved since training: the fixed sentences do as well
    assert warmup_sentences(tmp_path) == list(FALLBACK_WARMUP_SENTENCES)


def test_an_existing_version_is_never_overwritten_and_bad_arguments_write_nothing(model_dir, export_path, tmp_path):
    export_dir = export_path.parent
    before = sorted(path.name for path in export_dir.iterdir())
    with pytest.raises(FileExistsError, match=r"version: .*1 exists already.*Fix: leave --version out .*\(2\)"):
        export_saved_model(model_dir, export_dir, version=1)
    with pytest.raises(FileNotFoundError, match="model_dir: .*missing is not a folder"):
        export_saved_model(tmp_path / "missing", tmp_path / "exports")
    with pytest.raises(ValueError, match=r"n_best: must be an int in \[1, beam_size=2\], got 3.*Fix"):
        export_saved_model(model_dir, export_dir, DecodingSettings(beam_size=2, n_best=3))
    with pytest.raises(ValueError, match="version: must be an integer >= 0"):
        export_saved_model(model_dir, export_dir, version=-1)
    with pytest.raises(ValueError, match="is itself a SavedModel.*Fix: pass its parent"):
        export_saved_model(model_dir, export_path)
    assert sorted(path.name for path in export_dir.iterdir()) == before
    assert not (tmp_path / "missing").exists() and not (tmp_path / "exports").exists()
    with pytest.raises(ValueError, match=r"n_best: must be an int in \[1, 2\] \(the n_best this model was exported"):
        SavedModelTranslator(export_dir, n_best=3)
    with pytest.raises(FileNotFoundError, match="saved_model: .* is neither a SavedModel"):
        SavedModelTranslator(tmp_path)


def test_next_version_counts_numbered_folders_only(tmp_path):
    assert next_version(tmp_path / "nothing_yet") == 1
    for name in ("1", "3", "10", "latest", ".11.exporting-1234"):
        (tmp_path / name).mkdir()
    (tmp_path / "12").write_text("a file, not a version")
    assert next_version(tmp_path) == 11
