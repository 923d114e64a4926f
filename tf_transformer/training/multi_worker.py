"""The training loop for `MultiWorkerMirroredStrategy`, where Keras 3's `model.fit` fails.

keras-team/keras issue 20585: `fit` under MultiWorkerMirroredStrategy raises "Attempt to convert a value
(PerReplica...)". This loop does what TensorFlow's multi-worker custom-loop guide does: the model and the
Keras optimizer live in the strategy scope, each worker reads its own shard of the batches, one
`tf.function` step runs `strategy.run` with a `GradientTape`, and every worker saves checkpoints (the
chief into the model directory, the others into a temporary directory they delete).

A SIGTERM or SIGINT on any worker goes through TensorFlow's `PreemptionCheckpointHandler`: the workers
agree on the step after the one in progress, all save there (a collective operation) and stop with
`TrainingInterrupted`. When a worker dies without warning (SIGKILL, a lost machine), TensorFlow's
coordination service notices its missing heartbeats and the survivors' collectives fail; they stop with
`PeerWorkerLost` instead of waiting forever. Restarting every worker with the same command resumes from the
last checkpoint.
"""

from __future__ import annotations

import logging
import pathlib
import shutil
import signal
import tempfile
import time

import tensorflow as tf

from tf_transformer.errors import PeerWorkerLost  # defined there for the commands (no TensorFlow); re-exported
from tf_transformer.training.callbacks import TrainingDiverged, TrainingInterrupted, weights_are_finite

logger = logging.getLogger("tf_transformer")


def cluster_role(strategy: tf.distribute.Strategy):
    """(task_type, task_id, is_chief) of this process in `TF_CONFIG`'s cluster."""
    resolver = strategy.cluster_resolver
    task_type, task_id = resolver.task_type, resolver.task_id
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    is_chief = task_type in (None, "chief") or (task_type == "worker" and task_id == 0 and not has_chief)
    return task_type, task_id, is_chief


def wait_for_file(path: pathlib.Path, timeout_seconds: float = 600.0) -> None:
    """Waits until the chief has written `path` (a shared file system is assumed, as TensorFlow's guide does)."""
    deadline = time.time() + timeout_seconds
    while not path.is_file():
        if time.time() > deadline:
            raise TimeoutError(
                f"{path} did not appear within {timeout_seconds:.0f} s. Fix: check that the chief runs and that "
                "every worker sees the same --model_dir (a shared file system)."
            )
        time.sleep(0.5)


def fit_multi_worker(state, strategy, dataset_fn, train_config, log_dir, stop_signals=None):
    """Trains from the optimizer's current step to `train_config.train_steps`; returns the loss history.

    Args:
        state: a `TrainingState` whose model and optimizer (its variables included) were built in
            `strategy.scope()`; its loss, a `MaskedCrossEntropy`, divides by the token count of all replicas, so
            the summed per-replica values are the global token mean; its checkpoint and manager are the chief's
            (in the model directory); its resume state (or None), in the checkpoint, has its input position
            advanced after every step (before any save).
        strategy: a `MultiWorkerMirroredStrategy`.
        dataset_fn: `input_context -> tf.data.Dataset` of per-replica batches.
        train_config: steps, checkpoint period, logging period.
        log_dir: TensorBoard directory (written by the chief only).
        stop_signals: a `StopSignals` (entered) whose SIGTERM / SIGINT stops all workers after a common
            step, each saving a checkpoint there; None for no signal handling.

    Raises:
        TrainingInterrupted: a worker received SIGTERM or SIGINT; the checkpoint was saved.
        PeerWorkerLost: a peer died; the last checkpoint is kept.
    """
    model, optimizer, loss, manager, resume_state = (
        state.model, state.optimizer, state.loss, state.manager, state.resume_state
    )  # fmt: skip
    checkpoint = state.checkpoint
    _, task_id, is_chief = cluster_role(strategy)
    if is_chief:
        worker_manager = manager
    else:  # every worker must save (the save may run collectives); only the chief's copy is kept
        temporary = pathlib.Path(manager.directory) / f".worker-{task_id}"
        worker_manager = tf.train.CheckpointManager(checkpoint, str(temporary), max_to_keep=1)

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

    @tf.function
    def train_step(iterator):
        def step_fn(batch):
            (source_ids, target_input_ids), target_output_ids = batch
            with tf.GradientTape() as tape:
                logits = model((source_ids, target_input_ids), training=True)
                value = loss(target_output_ids, logits)
            gradients = tape.gradient(value, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
            return value

        per_replica = strategy.run(step_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    def train_and_count(iterator):
        # The preemption handler saves right after the function it runs: the position must count this step.
        value = train_step(iterator)
        if resume_state is not None:
            resume_state.advance()
        return value

    def save():
        if not weights_are_finite(model):
            raise TrainingDiverged(f"the weights became NaN or infinite by step {int(optimizer.iterations.numpy())}")
        worker_manager.save(checkpoint_number=int(optimizer.iterations.numpy()))

    def remove_worker_copy():
        if not is_chief:
            shutil.rmtree(worker_manager.directory, ignore_errors=True)

    counter_dir = tempfile.mkdtemp(prefix="tf_transformer_preemption_")
    preemption = _preemption_handler(
        strategy, save, stop_signals, optimizer, manager if is_chief else None, counter_dir
    )
    writer = tf.summary.create_file_writer(log_dir) if is_chief else tf.summary.create_noop_writer()
    history, window = [], []
    step = int(optimizer.iterations.numpy())
    try:
        while step < train_config.train_steps:
            value = float(preemption.run(train_and_count, iterator) if preemption else train_and_count(iterator))
            step = int(optimizer.iterations.numpy())
            if not tf.math.is_finite(value):
                raise TrainingDiverged(f"the training loss became {value} at step {step}")
            window.append(value)
            if step % train_config.log_every == 0:
                with writer.as_default(step=step):
                    tf.summary.scalar("loss", sum(window) / len(window))
                    tf.summary.scalar("learning_rate", float(optimizer.learning_rate))
                logger.info("step %d: loss %.4f", step, sum(window) / len(window))
            if step % train_config.checkpoint_every == 0 or step >= train_config.train_steps:
                save()
                history.append(sum(window) / len(window))
                window = []
    except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.DeadlineExceededError) as error:
        raise PeerWorkerLost(
            f"a peer worker stopped responding near step {step} ({type(error).__name__}); the last checkpoint is "
            f"{manager.latest_checkpoint or 'none yet'}. Fix: restart every worker with the same command (and "
            "TF_CONFIG): training resumes from the last checkpoint."
        ) from None
    finally:
        writer.flush()
        remove_worker_copy()
        shutil.rmtree(counter_dir, ignore_errors=True)
    return {"loss": history}


def _preemption_handler(strategy, save, stop_signals, optimizer, manager, counter_dir):
    """TensorFlow's PreemptionCheckpointHandler, fed by `stop_signals` and saving through `save`.

    `manager` is the chief's (the model directory's) on the chief, None on the other workers, whose saves go to
    a temporary folder: their `TrainingInterrupted` names no checkpoint.

    The handler agrees on a step across the workers and calls `save` on each there. Its own checkpoint (of
    its run counter) would go into `counter_dir`, a private temporary folder, but is never written: `save_fn`
    replaces its save, so every worker starts each process at count 0, as the handler's step agreement
    requires.
    """
    if stop_signals is None:
        return None

    def stop():
        received = stop_signals.received or signal.SIGTERM  # a peer's signal: the cluster is being stopped
        checkpoint = manager.latest_checkpoint if manager is not None else None
        raise TrainingInterrupted(received, int(optimizer.iterations.numpy()), checkpoint)

    counter_manager = tf.train.CheckpointManager(tf.train.Checkpoint(), counter_dir, max_to_keep=1)
    config = tf.distribute.experimental.TerminationConfig(
        termination_watcher_fn=lambda: stop_signals.received is not None, exit_fn=stop, grace_period=0,
        save_fn=save,
    )  # fmt: skip
    return tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, counter_manager, termination_config=config
    )
