"""Validation BLEU during training: sacreBLEU's scores, TensorBoard scalars, the best checkpoint, resume, loading."""

import collections
import json
import pathlib

import numpy as np
import pytest
import sacrebleu
import tensorflow as tf

import tf_transformer as tft
from tf_transformer.checkpoints import load_translation_model, resolve_checkpoint
from tf_transformer.config import ConfigError
from tf_transformer.data import DataConfig
from tf_transformer.decoding import DecodingSettings
from tf_transformer.decoding.text import TextTranslator
from tf_transformer.export import export_saved_model
from tf_transformer.training import TrainConfig, train
from tf_transformer.training import trainer as trainer_lib
from tf_transformer.training.validation_bleu import ValidationBleu, read_best_bleu

MODEL = tft.TransformerConfig.from_preset("tiny").replace(
    d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, max_length=48, dropout=0.0
)
TRAINING = tft.Recipe.load("tiny").training  # the preset's schedule and label smoothing
SENTENCES = 12


def data_config(corpus, **changes):
    values = dict(
        dataset="files",
        train_source=str(corpus["train_en"]),
        train_target=str(corpus["train_de"]),
        valid_source=str(corpus["valid_en"]),
        valid_target=str(corpus["valid_de"]),
        vocab_size=500,
        batch_tokens=1024,
        max_length=48,
        seed=1,
    )
    return DataConfig(**{**values, **changes})


def scalars(log_dir):
    """{tag: {step: value}} of every scalar in the event files under `log_dir`."""
    values = collections.defaultdict(dict)
    for path in sorted(log_dir.glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                values[value.tag][event.step] = float(tf.make_ndarray(value.tensor))
    return values


def trainable(model):
    return [variable.numpy() for variable in model.trainable_variables]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, small_corpus):
    """A 4-step run scored at steps 2 and 4 on the first SENTENCES validation pairs, greedy, keeping the best."""
    model_dir = tmp_path_factory.mktemp("bleu_run")
    # float32 on every CPU: the test re-translates with a float32 model loaded from the checkpoint, which a run
    # in mixed_bfloat16 (what "auto" picks on CPUs with AVX-512 BF16) would not match to 1e-4 BLEU.
    train_config = TrainConfig(
        model_dir=str(model_dir), train_steps=4, checkpoint_every=2, validation_batches=1, bleu_every=2,
        bleu_sentences=SENTENCES, seed=1, mixed_precision="float32", **TRAINING,
    )  # fmt: skip
    result = train(MODEL, data_config(small_corpus), train_config)
    return model_dir, result


def test_logged_scores_are_sacrebleus_scores_of_the_models_translations(trained, small_corpus):
    model_dir, result = trained
    logged = scalars(model_dir / "logs" / "bleu")
    assert set(logged) == {"validation/bleu", "validation/chrf", "validation/tok_lower_bleu"}
    for tag in logged:
        assert sorted(logged[tag]) == [2, 4], tag
    # Independently: the step-4 weights, a fresh translator, sacrebleu's own functions.
    model, tokenizer, _ = load_translation_model(model_dir, model_dir / "checkpoints" / "ckpt-4")
    sources = small_corpus["valid_en"].read_text(encoding="utf-8").splitlines()[:SENTENCES]
    references = small_corpus["valid_de"].read_text(encoding="utf-8").splitlines()[:SENTENCES]
    hypotheses = [best[0][0] for best in TextTranslator(model, tokenizer, DecodingSettings(method="greedy"))(sources)]
    assert any(hypotheses)
    expected = {
        "validation/bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "validation/chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
        "validation/tok_lower_bleu": sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score,
    }
    assert expected["validation/chrf"] > 1  # a real comparison, not 0 == 0
    for tag, value in expected.items():
        assert logged[tag][4] == pytest.approx(value, abs=1e-4), tag
    # The best of the two evaluations is kept (the first one on a tie).
    bleu = logged["validation/bleu"]
    best_step = 4 if bleu[4] > bleu[2] else 2
    best = json.loads((model_dir / "best" / "best.json").read_text())
    assert best["step"] == best_step and best["checkpoint"] == f"ckpt-{best_step}"
    assert best["bleu"] == pytest.approx(bleu[best_step], abs=1e-4)
    assert best["settings"] == {"sentences": SENTENCES, "beam_size": 1}
    assert result.best == best


def test_checkpoint_best_loads_the_weights_of_the_best_step(trained):
    model_dir, _ = trained
    step = json.loads((model_dir / "best" / "best.json").read_text())["step"]
    best, _, _ = load_translation_model(model_dir, "best")
    same_step, _, _ = load_translation_model(model_dir, model_dir / "checkpoints" / f"ckpt-{step}")
    other, _, _ = load_translation_model(model_dir, model_dir / "checkpoints" / f"ckpt-{6 - step}")
    for a, b in zip(trainable(best), trainable(same_step), strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(trainable(best), trainable(other), strict=True))
    assert resolve_checkpoint("best", model_dir) == str(model_dir / "best" / f"ckpt-{step}")


def test_export_of_the_best_checkpoint_records_it(trained, tmp_path):
    model_dir, _ = trained
    step = json.loads((model_dir / "best" / "best.json").read_text())["step"]
    version = export_saved_model(model_dir, tmp_path / "export", DecodingSettings(beam_size=1), checkpoint="best")
    recorded = json.loads((pathlib.Path(version) / "assets" / "export_config.json").read_text())
    assert recorded["checkpoint"] == str(model_dir / "best" / f"ckpt-{step}")


class StubTranslator:
    """Returns the queued hypotheses, one list per call, in TextTranslator's n-best format."""

    def __init__(self):
        self.queue = []
        self.calls = 0

    def __call__(self, sentences):
        self.calls += 1
        hypotheses = self.queue.pop(0)
        assert len(hypotheses) == len(sentences)
        return [[(text, 0.0)] for text in hypotheses]


REFERENCES = [
    "Ein Mann fährt mit dem Fahrrad über eine Brücke.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau liest ein Buch im Park.",
    "Kinder spielen Fußball auf der Straße.",
]
GOOD = REFERENCES[:2] + ["Eine Frau liest ein Buch.", "Kinder spielen auf der Straße."]  # BLEU 80
WORSE = ["Ein Mann fährt mit dem Auto.", "Zwei Katzen spielen im Garten.", "Eine Frau liest.", "Kinder spielen."]


@pytest.fixture(scope="module")
def tiny_model():
    model = tft.Transformer(MODEL.replace(vocab_size=64))
    model.build()
    return model


def run_callback(tiny_model, tmp_path, evaluations, every=2):
    """Drives a ValidationBleu as fit would: epoch ends at the given steps, each with its hypotheses and weights.

    Returns (callback, {step: weights when evaluated}).
    """
    translator, step = StubTranslator(), tf.Variable(evaluations[0][0] - every, dtype=tf.int64)
    callback = ValidationBleu(
        translator, ["source"] * len(REFERENCES), REFERENCES, step, every, tmp_path / "logs", tmp_path / "best",
        settings={"sentences": len(REFERENCES), "beam_size": 1},
    )  # fmt: skip
    callback.set_model(tiny_model)
    callback.on_train_begin()
    rng, weights = np.random.default_rng(evaluations[0][0]), {}
    for epoch, (at, hypotheses) in enumerate(evaluations):
        for variable in tiny_model.trainable_variables:
            variable.assign(rng.normal(size=variable.shape).astype(np.float32))
        weights[at] = trainable(tiny_model)
        translator.queue.append(hypotheses)
        step.assign(at)
        callback.on_epoch_end(epoch)
    callback.on_train_end()
    assert translator.calls == len(evaluations) and not translator.queue
    return callback, weights


def best_weights(tiny_model, best_dir):
    fresh = tft.Transformer(tiny_model.config)
    fresh.build()
    tf.train.Checkpoint(model=fresh).read(tf.train.latest_checkpoint(str(best_dir))).expect_partial()
    return trainable(fresh)


def test_the_best_checkpoint_changes_only_when_bleu_improves_also_after_a_resume(tiny_model, tmp_path):
    callback, weights = run_callback(tiny_model, tmp_path, [(2, GOOD), (4, WORSE)])
    scores = [evaluation["bleu"] for evaluation in callback.evaluations]
    assert scores == pytest.approx([sacrebleu.corpus_bleu(h, [REFERENCES]).score for h in (GOOD, WORSE)])
    assert 0 < scores[1] < scores[0] < 100
    assert json.loads((tmp_path / "best" / "best.json").read_text())["step"] == 2
    assert read_best_bleu(tmp_path / "best") == pytest.approx(scores[0])
    for a, b in zip(best_weights(tiny_model, tmp_path / "best"), weights[2], strict=True):
        np.testing.assert_array_equal(a, b)

    # best.json lost (a crash right after the checkpoint): the score saved in the checkpoint still counts.
    (tmp_path / "best" / "best.json").unlink()
    reread = ValidationBleu(
        StubTranslator(), ["source"], ["reference"], tf.Variable(4), 2, tmp_path / "l", tmp_path / "best"
    )
    assert reread.best == {"step": 2, "checkpoint": "ckpt-2", "bleu": pytest.approx(scores[0])}

    # A restarted run reads the best score back: a worse model is not kept, a better one replaces it.
    resumed, weights = run_callback(tiny_model, tmp_path, [(6, WORSE), (8, REFERENCES)])
    assert resumed.best["step"] == 8 and resumed.best["bleu"] == pytest.approx(100.0)
    assert sorted(path.name for path in (tmp_path / "best").glob("*.index")) == ["ckpt-8.index"]
    for a, b in zip(best_weights(tiny_model, tmp_path / "best"), weights[8], strict=True):
        np.testing.assert_array_equal(a, b)
    logged = scalars(tmp_path / "logs")["validation/bleu"]
    assert sorted(logged) == [2, 4, 6, 8]
    assert logged[8] == pytest.approx(100.0) and logged[6] == pytest.approx(scores[1], abs=1e-4)


def test_a_lowercasing_model_is_scored_and_kept_on_lowercased_text(tiny_model, tmp_path):
    translator, step = StubTranslator(), tf.Variable(2, dtype=tf.int64)
    callback = ValidationBleu(
        translator, ["source"] * 4, REFERENCES, step, 2, tmp_path / "logs", tmp_path / "best", lowercase=True
    )
    callback.set_model(tiny_model)
    callback.on_train_begin()
    translator.queue.append([line.lower() for line in GOOD])  # what a lowercasing model writes
    step.assign(4)
    callback.on_epoch_end(0)
    callback.on_train_end()
    folded = [line.lower() for line in REFERENCES]
    expected = sacrebleu.corpus_bleu([line.lower() for line in GOOD], [folded]).score
    assert callback.best["bleu"] == pytest.approx(expected) and expected > 70  # cased: each capital a miss
    assert "|case:lc|" in callback.best["bleu_signature"]
    assert read_best_bleu(tmp_path / "best") == pytest.approx(expected)


def test_evaluations_come_at_the_first_epoch_end_at_or_after_each_multiple_and_at_the_end(tiny_model, tmp_path):
    translator, step = StubTranslator(), tf.Variable(1, dtype=tf.int64)  # resumed at step 1
    callback = ValidationBleu(translator, ["source"] * 4, REFERENCES, step, 4, tmp_path / "logs")
    callback.set_model(tiny_model)
    callback.on_train_begin()
    evaluated = []
    for epoch, at in enumerate((3, 5, 7, 9, 11, 13)):  # epochs of 2 steps, off the multiples of 4
        step.assign(at)
        translator.queue.append(WORSE)
        callback.on_epoch_end(epoch)
        if not translator.queue:
            evaluated.append(at)
        translator.queue.clear()
    step.assign(14)
    translator.queue.append(WORSE)
    callback.on_train_end()  # the last step was not evaluated: it is now
    assert evaluated + [14] == [5, 9, 13, 14]
    assert not (tmp_path / "best").exists()  # no best_dir: nothing kept


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(bleu_every=-1), "bleu_every"),
        (dict(bleu_sentences=0), "bleu_sentences"),
        (dict(bleu_beam_size=0), "bleu_beam_size"),
        (dict(keep_best="yes"), "keep_best"),
    ],
)
def test_bleu_settings_are_validated(changes, field):
    with pytest.raises(ConfigError, match=f"^{field}:.*Fix"):
        TrainConfig(model_dir="runs/x", **changes)


def test_bleu_needs_validation_data_and_a_keras_fit_strategy(tmp_path, small_corpus):
    train_config = TrainConfig(model_dir=str(tmp_path / "run"), bleu_every=2)
    no_valid = data_config(small_corpus, valid_source=None, valid_target=None)
    with pytest.raises(ConfigError, match="bleu_every: validation BLEU needs a validation split.*Fix"):
        train(MODEL, no_valid, train_config)
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="bleu_every:.*multi_worker_mirrored.*Fix: set --bleu_every=0"):
        trainer_lib._check_settings(MODEL, data_config(small_corpus), train_config, multi_worker=True)


def test_checkpoint_best_without_a_best_checkpoint_says_how_to_get_one(tmp_path):
    with pytest.raises(FileNotFoundError, match="best.*holds none. Fix: train with --bleu_every"):
        resolve_checkpoint("best", tmp_path)
