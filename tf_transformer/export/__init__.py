"""SavedModels for TensorFlow Serving: strings in, translations out, with the tokenizer and beam search inside.

    path = export_saved_model("runs/multi30k_tiny", "exports/multi30k")     # exports/multi30k/1
    loaded = tf.saved_model.load(str(path))      # needs only tensorflow and tensorflow_text imported
    loaded.signatures["serving_default"](inputs=tf.constant(["A dog runs."]))   # {"outputs", "scores"}

An export is one version folder in TensorFlow Serving's layout (`EXPORT_DIR/<version>/`: saved_model.pb,
variables/, assets/, assets.extra/), holding a `TranslationModule` with three signatures:

| signature | inputs | outputs |
| --- | --- | --- |
| `serving_default` | `inputs`: string [batch] | `outputs`: string [batch], `scores`: float32 [batch] |
| `translate_nbest` | `inputs`: string [batch] | `outputs`: string [batch, n_best], `scores`: float32 [batch, n_best] |
| `translate_ids` | `source_ids`: int32 [batch, len] | `output_ids`: int32 [batch, T], `scores`: float32 [batch] |

Scores are length-penalised log-probabilities (beam search). The graph uses TensorFlow core and
tensorflow-text ops only (stock TensorFlow Serving links both), so serving needs no Python.

Defined input behaviour (the same as `tf_transformer.decoding.translate_texts`):

- Empty or blank sentence (no tokens): translation "" with score 0.0; it is not run through the model.
- Sentence longer than the model's `max_length - 1` tokens: translated from its first `max_length - 1`
  tokens (the source then ends with EOS, as in training). It never fails.
- A batch mixing short and long sentences: decoded together (padded), results in input order.
- Empty batch (shape [0]): empty outputs.
- Bytes that are not UTF-8: each maximal invalid subsequence becomes U+FFFD (the replacement character),
  as Python's `bytes.decode("utf-8", errors="replace")`; outputs are always valid UTF-8.

Modules: `module` (the `tf.Module`), `exporter` (`export_saved_model`, versions, assets, warmup),
`warmup` (the warmup requests), `client` (REST and gRPC clients of a model server), `saved_model`
(translating with an export in this process).
"""

from tf_transformer._lazy import lazy_attributes

# Imported on first use (PEP 562; see tf_transformer/_lazy.py): public name -> its module.
_LAZY = {
    "EXPORT_CONFIG_FILE": "tf_transformer.export.exporter",
    "export_saved_model": "tf_transformer.export.exporter",
    "ids_predict_request": "tf_transformer.export.client",
    "next_version": "tf_transformer.export.exporter",
    "predict_request": "tf_transformer.export.client",
    "read_warmup_requests": "tf_transformer.export.warmup",
    "rest_request": "tf_transformer.export.client",
    "SavedModelTranslator": "tf_transformer.export.saved_model",
    "ServedModel": "tf_transformer.export.client",
    "translate_grpc": "tf_transformer.export.client",
    "translate_rest": "tf_transformer.export.client",
    "translate_with_saved_model": "tf_transformer.export.saved_model",
    "translate_with_server": "tf_transformer.export.client",
    "TranslationModule": "tf_transformer.export.module",
    "WARMUP_FILE": "tf_transformer.export.exporter",
    "warmup_requests": "tf_transformer.export.warmup",
}
__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)

__all__ = [
    "EXPORT_CONFIG_FILE", "SavedModelTranslator", "ServedModel", "TranslationModule", "WARMUP_FILE",
    "export_saved_model", "ids_predict_request", "next_version", "predict_request", "read_warmup_requests",
    "rest_request", "translate_grpc", "translate_rest", "translate_with_saved_model", "translate_with_server",
    "warmup_requests",
]  # fmt: skip
