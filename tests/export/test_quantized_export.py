"""tools/export.py --quantize=int8: a smaller SavedModel of TensorFlow core and tensorflow-text ops that translates as
the in-process int8 model does; the commands' refusals of --quantize."""

import json
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.checkpoints import load_translation_model
from tf_transformer.decoding import DecodingSettings
from tf_transformer.decoding.text import TextTranslator
from tf_transformer.export import EXPORT_CONFIG_FILE
from tf_transformer.quantization import quantize_model


@pytest.fixture(scope="module")
def int8_export(model_dir, settings, tmp_path_factory):
    """tools/export.py --quantize=int8 of the shared model, with the shared export's decoding settings; while it
    runs, the int8 model is loaded and quantized here. Returns (version folder, in-process int8 model and tokenizer)."""
    base = tmp_path_factory.mktemp("int8_exports") / "multi30k"
    command = settings.tool("export.py") + [
        f"--model_dir={model_dir}", f"--export_dir={base}", "--quantize=int8", f"--n_best={settings.N_BEST}",
        *(f"--{name}={value}" for name, value in settings.DECODING.items()),
    ]  # fmt: skip
    logs = tmp_path_factory.mktemp("int8_export_job")
    with open(logs / "stdout", "wb") as stdout, open(logs / "stderr", "wb") as stderr:
        job = subprocess.Popen(
            [str(part) for part in command], stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=settings.ENV
        )
    try:
        model, tokenizer, _ = load_translation_model(model_dir)
        quantize_model(model, "int8")
        returncode = job.wait(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert returncode == 0, (logs / "stderr").read_text(errors="replace")[-3000:]
    assert (logs / "stdout").read_text().strip().splitlines()[-1] == str(base / "1")
    return base / "1", model, tokenizer


def directory_bytes(path):
    return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())


def test_the_int8_export_says_so_and_stores_int8_matrices(int8_export):
    path, model, _ = int8_export
    assert json.loads((path / "assets" / EXPORT_CONFIG_FILE).read_text())["quantize"] == "int8"
    reader = tf.train.load_checkpoint(str(path / "variables" / "variables"))
    shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    stored = {name: (int(np.prod(shapes[name])), dtypes[name]) for name in shapes if "OPTIMIZER" not in name}
    int8_stored = sum(size for size, dtype in stored.values() if dtype == tf.int8)
    int8_model = sum(int(np.prod(variable.shape)) for variable in model.weights if variable.dtype == "int8")
    assert int8_stored == int8_model > 0.8 * sum(int(np.prod(variable.shape)) for variable in model.weights)
    embedding_shape = [model.config.vocab_size, model.config.d_model]
    assert not [name for name in shapes if shapes[name] == embedding_shape and dtypes[name] != tf.int8]
    # The variables file is those tensors: 1 byte an int8 weight where a float32 export stores 4.
    tensor_bytes = sum(size * dtype.size for size, dtype in stored.values() if dtype != tf.string)
    assert directory_bytes(path / "variables") <= tensor_bytes + 8192 + sum(
        len(reader.get_tensor(name)) for name in stored if stored[name][1] == tf.string
    )


def test_the_int8_graph_uses_only_tensorflow_core_and_tensorflow_text_ops(int8_export):
    from tensorflow.core.protobuf import saved_model_pb2

    path, _, _ = int8_export
    graph = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes()).meta_graphs[0].graph_def
    ops = {node.op for node in graph.node} | {node.op for f in graph.library.function for node in f.node_def}
    assert not ops & {"PyFunc", "PyFuncStateless", "EagerPyFunc"}
    assert {op for op in ops if not hasattr(tf.raw_ops, op)} == {
        "SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp"
    }  # fmt: skip
    variables = tf.train.list_variables(str(path / "variables" / "variables"))
    assert any("query_kernel" in name for name, _ in variables)


def test_the_int8_export_translates_as_the_in_process_int8_model(int8_export, sentences, settings):
    path, model, tokenizer = int8_export
    written = json.loads((path / "assets" / EXPORT_CONFIG_FILE).read_text())
    # The export's decoding settings, from what export_config.json records (the length cap as parsed).
    cap = written["max_decode_length"] or f"{written['max_decode_length_ratio']}x+{written['extra_decode_length']}"
    decoding = DecodingSettings(
        beam_size=written["beam_size"], length_penalty=written["length_penalty"], max_decode_length=cap,
        no_repeat_ngram_size=written["no_repeat_ngram_size"], min_decode_length=written["min_decode_length"],
    )  # fmt: skip
    expected = TextTranslator(model, tokenizer, decoding)(sentences)
    result = tf.saved_model.load(str(path)).signatures["serving_default"](inputs=tf.constant(sentences))
    assert [text.decode("utf-8") for text in result["outputs"].numpy()] == [h[0][0] for h in expected]
    np.testing.assert_allclose(result["scores"].numpy(), [h[0][1] for h in expected], rtol=1e-6, atol=1e-6)


def test_bad_or_misplaced_quantize_flags_are_one_line_errors(int8_export, settings, model_dir):
    path, _, _ = int8_export
    bad = subprocess.run(
        [*map(str, settings.tool("export.py")), f"--model_dir={model_dir}", f"--export_dir={path.parent}",
         "--quantize=int4"],
        capture_output=True, text=True, timeout=120, env=settings.ENV,
    )  # fmt: skip
    assert bad.returncode != 0 and "--quantize" in bad.stderr and "int8" in bad.stderr
    assert "Traceback" not in bad.stderr
    refused = subprocess.run(
        [*map(str, settings.tool("translate.py")), f"--saved_model={path}", "--quantize=int8"],
        input="A dog.\n", capture_output=True, text=True, timeout=120, env=settings.ENV,
    )  # fmt: skip
    assert refused.returncode == 1, refused.stderr[-2000:]
    last_line = refused.stderr.strip().splitlines()[-1]
    assert last_line.startswith("error: --quantize: fixed when the model was exported, so not a flag with --saved_")
    assert "Traceback" not in refused.stderr
