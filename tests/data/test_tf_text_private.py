"""The tensorflow-text internals tf_transformer/data/_tf_text_private.py relies on are still there and still
work; these tests are the first to fail on a tf-text upgrade that moves them."""

import pathlib

import pytest
import tensorflow as tf

from tf_transformer.data import _tf_text_private

SENTENCE = "Zwei Hunde spielen im Schnee."


def upgrade_message(what):
    return (
        f"tensorflow-text {_tf_text_private.tf_text_version()} broke what tf_transformer/data/_tf_text_private.py "
        f"relies on (last checked with {_tf_text_private.CHECKED_TF_TEXT_VERSION}): {what}. Fix: look for a public "
        "shared_name option in tf-text first, else adapt the module to the new internals; until then pin "
        f"tensorflow-text=={_tf_text_private.CHECKED_TF_TEXT_VERSION}."
    )


@pytest.fixture(scope="module")
def model(spm_dir):
    return next(pathlib.Path(spm_dir).glob("*.model")).read_bytes()


def test_the_internals_are_there():
    problems = _tf_text_private.relied_on_problems()
    assert not problems, upgrade_message("; ".join(problems))


def test_the_tokenizer_holds_the_shared_resource_and_tokenizes_as_tf_text(model):
    import tensorflow_text as text

    shared = _tf_text_private.shared_sentencepiece_tokenizer(model, out_type=tf.int32)
    plain = text.SentencepieceTokenizer(model=model, out_type=tf.int32)
    assert isinstance(shared._model_resource, _tf_text_private._SharedSentencepieceModel), upgrade_message(
        "the tokenizer no longer keeps the resource it was given"
    )
    ids = shared.tokenize([SENTENCE])
    assert ids.to_list() == plain.tokenize([SENTENCE]).to_list()
    assert shared.detokenize(ids).numpy().tolist() == [SENTENCE.encode()]


def test_only_the_shared_resource_survives_seeding(model):
    """Why the module exists. If tf-text's own resource starts surviving, tf-text fixed its kernel-owned
    resource (its TODO b/318839908) and the module can go."""
    import tensorflow_text as text

    shared = _tf_text_private.shared_sentencepiece_tokenizer(model, out_type=tf.int32)
    plain = text.SentencepieceTokenizer(model=model, out_type=tf.int32)
    expected = shared.tokenize([SENTENCE]).to_list()
    tf.random.set_seed(8)  # drops TensorFlow's cached kernels, and the resources they own
    assert shared.tokenize([SENTENCE]).to_list() == expected, upgrade_message("the shared resource did not survive")
    try:
        plain.tokenize([SENTENCE])
    except tf.errors.NotFoundError:
        return
    pytest.fail(
        f"tensorflow-text {_tf_text_private.tf_text_version()}'s own SentencepieceTokenizer now survives "
        "tf.random.set_seed. Fix: use it in tf_transformer/data/tokenizer.py and delete _tf_text_private.py."
    )
