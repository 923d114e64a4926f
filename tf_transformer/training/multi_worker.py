"""The training loop for `MultiWorkerMirroredStrategy`, where Keras 3's `model.fit` fails.

keras-team/keras issue 20585: `fit` under MultiWorkerMirroredStrategy raises "Attempt to convert a value
(PerReplica...)". This loop does what TensorFlow's multi-worker custom-loop guide does: the model and the
Keras optimizer live in the strategy scope, each worker reads its own shard of the batches, one
`tf.function` step runs `strategy.run` with a `GradientTape`, and every worker saves checkpoints (the
chief into the model directory, the others into a temporary directory they delete).
"""

from __future__ import annotations

import logging
import pathlib
import shutil
import time

import tensorflow as tf

from tf_transformer.training.callbacks import TrainingDiverged, weights_are_finite

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


def fit_multi_worker(model, optimizer, loss, strategy, dataset_fn, checkpoint, manager, train_config, log_dir):
    """Trains from the optimizer's current step to `train_config.train_steps`; returns the loss history.

    Args:
        model, optimizer: built in `strategy.scope()` (the optimizer's variables included).
        loss: a `MaskedCrossEntropy`; it divides by the token count of all replicas, so the summed
            per-replica values are the global token mean.
        strategy: a `MultiWorkerMirroredStrategy`.
        dataset_fn: `input_context -> tf.data.Dataset` of per-replica batches.
        checkpoint, manager: the chief's checkpoint and manager (in the model directory).
        train_config: steps, checkpoint period, logging period.
        log_dir: TensorBoard directory (written by the chief only).
    """
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

    writer = tf.summary.create_file_writer(log_dir) if is_chief else tf.summary.create_noop_writer()
    history, window, last_saved = [], [], None
    step = int(optimizer.iterations.numpy())
    while step < train_config.train_steps:
        value = float(train_step(iterator))
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
            if not weights_are_finite(model):
                raise TrainingDiverged(f"the weights became NaN or infinite by step {step}")
            worker_manager.save(checkpoint_number=step)
            last_saved = step
            history.append(sum(window) / len(window))
            window = []
    if not is_chief and last_saved is not None:
        shutil.rmtree(worker_manager.directory, ignore_errors=True)
    writer.flush()
    return {"loss": history}
