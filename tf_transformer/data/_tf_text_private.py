"""The one place tf_transformer relies on tensorflow-text internals: SentencePiece tokenizers whose model
resource survives `tf.random.set_seed`.

Why: tf-text's `SentencepieceTokenizer` keeps its model in a resource owned by the kernel that created it
(its TODO b/318839908), and TensorFlow drops its cached kernels whenever `tf.random.set_seed` or
`keras.utils.set_random_seed` runs: every tokenizer made before a seeding call then fails with
"Resource ..._SentencepieceOp... does not exist". A `shared_name` keeps the resource in the device's resource
manager instead, but tf-text has no public way to give one (checked with 2.21: `SentencepieceTokenizer` takes
none, and `FastSentencepieceTokenizer`, which holds no resource, has no byte fallback, so its pieces differ).
So this module creates the resource itself, with the public `tf.saved_model.experimental.TrackableResource`
contract, and hands it to the tokenizer.

Relied on (`relied_on_problems` checks each against the installed tf-text; tests/data/test_tf_text_private.py
fails on the first upgrade that breaks one, naming the version):
- `tensorflow_text.python.ops.sentencepiece_tokenizer.gen_sentencepiece_tokenizer.sentencepiece_op`, the op
  that creates the resource, and its `model` and `shared_name` arguments;
- `SentencepieceTokenizer._model_resource`, the attribute whose `resource_handle` its methods use.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
from typing import List

import tensorflow as tf

# The tf-text release these internals were last checked against (by the test and by hand).
CHECKED_TF_TEXT_VERSION = "2.21.1"
_SHARED_NAME_PREFIX = "tf_transformer_sentencepiece_"


def tf_text_version() -> str:
    """The installed tensorflow-text version, or "unknown"."""
    try:
        return importlib.metadata.version("tensorflow-text")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a source build without metadata
        return "unknown"


def shared_sentencepiece_tokenizer(model: bytes, **kwargs):
    """`tensorflow_text.SentencepieceTokenizer(model=model, **kwargs)` with its resource named after the model.

    The name is the model's SHA-256, so tokenizers (and SavedModels loaded into one server) share a resource
    only when the model is the same. The resource stays in the resource manager for the life of the process,
    one per distinct model.
    """
    import tensorflow_text as text

    tokenizer = text.SentencepieceTokenizer(model=model, **kwargs)
    shared_name = _SHARED_NAME_PREFIX + hashlib.sha256(model).hexdigest()
    tokenizer._model_resource = _SharedSentencepieceModel(model, shared_name)
    return tokenizer


class _SharedSentencepieceModel(tf.saved_model.experimental.TrackableResource):
    """The tokenizer's model resource, created with a `shared_name` (saved and restored like tf-text's own)."""

    def __init__(self, model: bytes, shared_name: str):
        super().__init__()
        self._model = model
        self._shared_name = shared_name
        _ = self.resource_handle  # creates the resource now, as tf-text does

    def _create_resource(self):
        from tensorflow_text.python.ops import sentencepiece_tokenizer

        with tf.name_scope("SentenceTokenizerInitializer"):
            return sentencepiece_tokenizer.gen_sentencepiece_tokenizer.sentencepiece_op(
                model=self._model, shared_name=self._shared_name
            )


def relied_on_problems() -> List[str]:
    """What of the tf-text internals listed in the module docstring the installed tf-text lacks ([] if none)."""
    try:
        from tensorflow_text.python.ops import sentencepiece_tokenizer
    except ImportError as error:
        return [f"tensorflow_text.python.ops.sentencepiece_tokenizer cannot be imported ({error})"]
    problems = []
    op = getattr(getattr(sentencepiece_tokenizer, "gen_sentencepiece_tokenizer", None), "sentencepiece_op", None)
    if op is None:
        problems.append("sentencepiece_tokenizer.gen_sentencepiece_tokenizer.sentencepiece_op is gone")
    else:
        missing = {"model", "shared_name"} - set(inspect.signature(op).parameters)
        if missing:
            problems.append(f"sentencepiece_op no longer takes {', '.join(sorted(missing))}")
    tokenizer_class = getattr(sentencepiece_tokenizer, "SentencepieceTokenizer", None)
    source = inspect.getsource(tokenizer_class) if tokenizer_class is not None else ""
    if "self._model_resource = " not in source or "self._model_resource.resource_handle" not in source:
        problems.append("SentencepieceTokenizer no longer keeps its resource in _model_resource.resource_handle")
    return problems
