"""The training loop of a run, from the restored step: `model.fit` with the run's callbacks (checkpoints, stop
conditions, the time budget, validation BLEU, TensorBoard), or the multi-worker loop."""

from __future__ import annotations

import functools
import itertools
import logging
import math
import random
import sys

import keras
import tensorflow as tf

from tf_transformer import data as data_lib
from tf_transformer.config import ConfigError
from tf_transformer.decoding.settings import DecodingSettings
from tf_transformer.decoding.text import TextTranslator
from tf_transformer.model_dir import BEST_DIR, BLEU_LOG_DIR, LOG_DIR, TRAIN_LOG_DIR
from tf_transformer.training import budget as budget_lib
from tf_transformer.training.callbacks import (
    CheckpointEveryEpoch,
    EpochProgress,
    LogFirstStep,
    StopAtStep,
    StopAtTimeLimit,
    StopOnNonFiniteLoss,
    StopSignals,
    TrainingDiverged,
    TrainingInterrupted,
    TrainingMonitor,
)
from tf_transformer.training.multi_worker import fit_multi_worker
from tf_transformer.training.validation_bleu import ValidationBleu

logger = logging.getLogger("tf_transformer")


def run_loop(run, model_config, data, state):
    """Trains the `TrainingState` from its restored step, as the `Run` says, on the `RunData`: `model.fit`, or the
    multi-worker loop. Returns `(history, best)`: the loss history and the best validation BLEU evaluation (None
    when the run keeps none).

    Raises:
        TrainingDiverged: the loss or the weights became NaN or infinite (the message says near which step).
        TrainingInterrupted: a signal stopped the run after the step in progress, saved.
    """
    train_config = run.train_config
    # None when off; multi-worker runs with bleu_every were refused by the trainer's _check_settings.
    bleu = _validation_bleu(state.model, data, run) if train_config.bleu_every else None
    try:
        with StopSignals() as stop_signals:
            # SIGTERM / SIGINT from here on: finish the step, save a checkpoint there, raise TrainingInterrupted.
            logger.info(
                "Training from step %d to %d on %d replica(s).", state.start_step, train_config.train_steps,
                run.replicas,
            )  # fmt: skip
            skip = int(state.resume_state.position.numpy())
            if skip:
                logger.info("Resuming the input where it stopped: skipping the %d batches already trained on.", skip)
            if run.multi_worker:
                history = _fit_multi_worker(run, data, state, stop_signals, skip)
            else:
                train_dataset, valid_dataset = _datasets(run, model_config, data, skip)
                callbacks = _callbacks(run, model_config, data.report, state, stop_signals)
                if bleu is not None:
                    callbacks.append(bleu)  # after the checkpoint of each epoch is saved
                history = _fit(state.model, train_dataset, valid_dataset, train_config, callbacks)
    except TrainingDiverged:  # a non-finite loss (StopOnNonFiniteLoss) or weights (the check before a save)
        raise TrainingDiverged(
            f"the training loss or weights became NaN or infinite near step {state.step}; the last good "
            f"checkpoint ({state.manager.latest_checkpoint or 'none yet'}) is kept. Fix: resume with a "
            "lower learning_rate_scale or more warmup_steps (--override), or prefer mixed_bfloat16 to mixed_float16."
        ) from None
    return history, bleu.best if bleu is not None else None


def _validation_bleu(model, data, run) -> ValidationBleu:
    """The callback that scores translations of the first `bleu_sentences` validation pairs (see TrainConfig), on
    lowercased text when the vocabulary lowercases (DataConfig.lowercase)."""
    train_config, model_dir = run.train_config, run.model_dir
    pairs = list(itertools.islice(data.valid_corpus.pairs(), train_config.bleu_sentences))
    if not pairs:
        raise ConfigError(
            f"bleu_every: the validation split ({data.valid_corpus.description}) has no pairs to translate. Fix: give "
            "a validation split with sentences, or set --bleu_every=0."
        )
    beam_size = train_config.bleu_beam_size
    # One translator for the whole run: its traced decoder reads the variables, so it follows the training.
    settings = DecodingSettings(method="beam" if beam_size > 1 else "greedy", beam_size=beam_size)
    translator = TextTranslator(model, data.tokenizer, settings)
    return ValidationBleu(
        translator,
        [source for source, _ in pairs],
        [target for _, target in pairs],
        model.optimizer.iterations,
        train_config.bleu_every,
        model_dir / BLEU_LOG_DIR,
        best_dir=model_dir / BEST_DIR if train_config.keep_best else None,
        settings={"sentences": len(pairs), "beam_size": beam_size},
        lowercase=run.data_config.lowercase,
    )


def _fit_multi_worker(run, data, state, stop_signals, skip: int) -> dict:
    """`fit_multi_worker` on each worker's shard of the one seeded order of batches, after the `skip` trained on."""

    def dataset_fn(input_context):
        # Every worker builds the same seeded order and keeps its own share of the batches.
        # Skipped before sharding: the position counts batches of the one seeded order.
        dataset = data_lib.make_dataset(
            run.data_config, data.tokenizer, "train", training=True, corpus=data.train_corpus, skip_batches=skip
        )
        return dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)

    log_dir = str(run.model_dir / TRAIN_LOG_DIR)
    return fit_multi_worker(state, run.strategy, dataset_fn, run.train_config, log_dir, stop_signals)


def _datasets(run, model_config, data, skip: int):
    """`(train, valid)`: the training batches after the `skip` trained on, and the validation batches (None
    without a validation split), each batch's rows a multiple of the replicas. Under `mirrored` (several replicas
    in one process) they come distributed, each replica reading its own rows (`read_per_replica`)."""
    data_config, train_config = run.data_config, run.train_config
    # With subword sampling the replicas' copies would cut the pairs differently: those runs keep the multi-device
    # iterator, and its slow frees.
    per_replica = isinstance(run.strategy, tf.distribute.MirroredStrategy) and not data_config.samples_subwords
    if per_replica:
        # Every replica makes the whole stream and must make the same one: a fixed order, one seed.
        seed = data_config.seed if data_config.seed is not None else random.SystemRandom().randrange(1 << 31)
        data_config = data_config.replace(deterministic=True, seed=seed)
        logger.info("Input: each of the %d replicas reads its own copy of the batches, keeping its rows.", run.replicas)
    batch_multiple = math.lcm(data_config.batch_multiple, run.replicas)

    def train_dataset():
        return data_lib.make_dataset(
            data_config, _training_tokenizer(data.tokenizer, data_config), "train", training=True,
            corpus=data.train_corpus, batch_multiple=batch_multiple, skip_batches=skip,
        )  # fmt: skip

    valid_dataset = None
    if data.valid_corpus is not None:
        num_batches = data_lib.scan_lengths(data_config, data.tokenizer, "valid", corpus=data.valid_corpus).num_batches
        valid_dataset = functools.partial(
            _validation_dataset, data_config, data.tokenizer, data.valid_corpus, train_config, num_batches,
            batch_multiple,
        )  # fmt: skip
    if not per_replica:
        return train_dataset(), valid_dataset() if valid_dataset else None
    return (
        read_per_replica(run.strategy, train_dataset),
        read_per_replica(run.strategy, valid_dataset) if valid_dataset else None,
    )


def read_per_replica(strategy, make_batches):
    """`make_batches()` distributed over the strategy's replicas without tf.distribute's multi-device iterator:
    each replica reads its own copy of the batches on the host and keeps its contiguous share of each batch's rows,
    so every step trains on the batch one device would. The multi-device iterator (`experimental_distribute_dataset`,
    what `fit` does with a plain dataset) runs tf.data's autotuning thread in its per-device iterators, and freeing
    it, as `fit` does after every validation pass, took up to two minutes on busy cores (benchmarks/NOTES.md entries
    42, 45). Each replica tokenizes the whole stream: the host's input work grows with the replicas."""
    replicas = strategy.num_replicas_in_sync

    def replica_batches(context):
        replica = context.input_pipeline_id
        batches = make_batches().map(functools.partial(_pad_rows_to_multiple, multiple=replicas))
        return batches.map(functools.partial(_rows_of_replica, replica=replica, replicas=replicas))

    options = tf.distribute.InputOptions(
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
        experimental_fetch_to_device=False,  # a plain iterator per replica; the ids are copied at each step
    )
    return strategy.distribute_datasets_from_function(replica_batches, options)


def _rows_of_replica(inputs, target_out, replica, replicas):
    """Replica `replica`'s contiguous share of a batch whose rows are a multiple of `replicas`."""
    rows = tf.shape(target_out)[0] // replicas

    def share(tensor):
        return tensor[replica * rows : (replica + 1) * rows]

    return tf.nest.map_structure(share, inputs), share(target_out)


def _training_tokenizer(tokenizer, data_config):
    """The tokenizer of the training batches: one that samples segmentations when the data config asks for subword
    regularization (`subword_nbest_size`), else the vocabulary's one best cut. Validation always cuts the one best
    way. A resumed run skips as many batches as it trained on; with sampling those batches are cut anew, so it goes
    on at about, not exactly, the pair where it stopped."""
    if not data_config.samples_subwords:
        return tokenizer
    logger.info(
        "Subword regularization: training pairs cut into a segmentation sampled from the %s best (alpha %g).",
        data_config.subword_nbest_size if data_config.subword_nbest_size > 0 else "all", data_config.subword_alpha,
    )  # fmt: skip
    return tokenizer.sampling(data_config.subword_nbest_size, data_config.subword_alpha)


def _validation_dataset(data_config, tokenizer, valid_corpus, train_config, num_batches, batch_multiple=1):
    dataset = data_lib.make_dataset(
        data_config, tokenizer, "valid", training=False, corpus=valid_corpus, batch_multiple=batch_multiple
    )
    if batch_multiple > 1:
        # The last, partly filled batch of each bucket must split evenly across the replicas too; rows of
        # padding add no token to the masked loss and metrics.
        dataset = dataset.map(functools.partial(_pad_rows_to_multiple, multiple=batch_multiple))
    # A known length lets Keras run validation to the end without a "ran out of data" warning.
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(num_batches))
    if train_config.validation_batches:
        dataset = dataset.take(train_config.validation_batches)
    return dataset


def _pad_rows_to_multiple(inputs, target_out, multiple):
    """A batch `((source, target_in), target_out)` with all-padding rows added up to a multiple of `multiple`."""
    extra = -tf.shape(target_out)[0] % multiple

    def pad(tensor):
        return tf.pad(tensor, [[0, extra], [0, 0]])

    return tf.nest.map_structure(pad, inputs), pad(target_out)


def _callbacks(run, model_config, report, state, stop_signals) -> list:
    """The callbacks of `model.fit`, in the order they must run: the non-finite check first, the input position
    before the checkpoint saves, the stop conditions and the time budget, the checkpoint (which on a signal
    `stop_signals` recorded saves after the step in progress and raises `TrainingInterrupted`), the writers."""
    train_config, model_dir = run.train_config, run.model_dir
    step = state.optimizer.iterations
    budget = None
    if state.plan is not None:  # fits the learning rate to the time limit
        budget = budget_lib.callback_for_run(
            state.plan, state.optimizer, model_config, train_config, report.num_batches, run.deadline
        )
    return [
        StopOnNonFiniteLoss(),  # first: nothing else runs after a NaN batch
        *([] if state.resume_state is None else [state.resume_state.counter()]),  # before the checkpoint saves
        StopAtStep(train_config.train_steps, step),
        LogFirstStep(run.started, step),
        *([] if run.deadline is None else [StopAtTimeLimit(run.deadline, step)]),
        *([] if budget is None else [budget]),
        CheckpointEveryEpoch(state.manager, step, stop_signals, train_config.checkpoint_every),
        keras.callbacks.TensorBoard(str(model_dir / LOG_DIR), update_freq=train_config.log_every),
        TrainingMonitor(str(model_dir / TRAIN_LOG_DIR), train_config.log_every, step),
        EpochProgress(),  # fit's progress output, in place of Keras' own (last, as Keras adds its own)
    ]


def _fit(model, train_dataset, valid_dataset, train_config, callbacks) -> dict:
    """`model.fit` in epochs of `checkpoint_every` steps, from the restored step to `train_steps` (or until a
    callback stops it); returns the Keras history. On `TrainingInterrupted` the TensorBoard writers are closed."""
    step = model.optimizer.iterations
    every = train_config.checkpoint_every
    try:
        history = model.fit(
            train_dataset,
            epochs=math.ceil(train_config.train_steps / every),
            initial_epoch=int(step.numpy()) // every,
            steps_per_epoch=every,
            validation_data=valid_dataset,
            callbacks=callbacks,
            shuffle=False,  # the pipeline shuffles
            verbose=1 if sys.stdout.isatty() else 2,
        )
    except TrainingInterrupted:
        for callback in callbacks:  # fit ends without on_train_end: flush and close the TensorBoard files
            if isinstance(callback, (keras.callbacks.TensorBoard, TrainingMonitor)):
                callback.on_train_end()
        raise
    return history.history
