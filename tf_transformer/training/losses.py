"""The training loss: label-smoothed cross-entropy averaged over the non-padding target tokens."""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

_REDUCTIONS = ("mean_with_sample_weight", "sum", "none", None)


@keras.saving.register_keras_serializable(package="tf_transformer")
class MaskedCrossEntropy(keras.losses.Loss):
    """Label-smoothed cross-entropy over target tokens, ignoring padding.

    Each token's loss is the cross-entropy between the model's softmax and the label-smoothed target
    distribution of Szegedy et al. (2016, "Rethinking the Inception Architecture", section 7), as used
    by Vaswani et al. (2017, section 5.4):

        q = (1 - eps) * onehot(y) + eps / vocab
        loss(y, z) = -sum_k q_k * log_softmax(z)_k
                   = logsumexp(z) - (1 - eps) * z_y - eps * mean(z)

    Under the TensorFlow backend its fused softmax cross-entropy kernels compute it (with sparse labels when eps is
    0); under JAX and PyTorch, `keras.ops`.

    Reduction: every token gets the weight `w = (y != pad_id) * sample_weight` (`sample_weight`
    defaults to 1 and, like any Keras mask on `y_pred`, multiplies in). The default reduction
    "mean_with_sample_weight" returns `sum(w * loss) / sum(w)` over the whole global batch, i.e. the
    mean over non-padding tokens when no `sample_weight` is given, and 0 (not NaN) when `sum(w)` is
    0. Under a `tf.distribute` strategy `sum(w)` is summed across replicas, so the replicas' summed
    gradients are those of the global token mean even when replicas hold different numbers of
    tokens; the value each replica returns keeps Keras' `1 / num_replicas` scaling, so
    `model.fit`'s reported loss is the same as without a strategy. "sum" returns `sum(w * loss)`;
    "none" returns the per-token `w * loss`, shape [batch, length].

    Args:
        label_smoothing: eps in [0, 1); 0 is plain cross-entropy (the paper uses 0.1).
        pad_id: the target id that marks padding; those positions contribute nothing.
        name: the loss name.
        **kwargs: `reduction` (one of "mean_with_sample_weight", "sum", "none", None) and the other
            `keras.losses.Loss` arguments. The computation is float32 whatever `dtype` says.

    Call args:
        y_true: int target ids, [batch, length] (a trailing axis of size 1 is accepted).
        y_pred: logits, [batch, length, vocab], any float dtype (upcast to float32).
        sample_weight: optional weights broadcastable to [batch, length], e.g. [batch] per sequence
            or [batch, length] per token.

    Returns:
        A float32 scalar (or [batch, length] for reduction "none").

    Example:

    >>> loss = MaskedCrossEntropy(label_smoothing=0.1)
    >>> y_true = [[5, 3, 0]]                  # the last token is padding
    >>> logits = keras.random.normal((1, 3, 8))
    >>> value = loss(y_true, logits)          # mean over the 2 real tokens
    >>> model.compile(optimizer="adam", loss=loss)  # doctest: +SKIP
    """

    def __init__(self, label_smoothing=0.0, pad_id=0, name="masked_cross_entropy", **kwargs):
        reduction = kwargs.pop("reduction", "mean_with_sample_weight")
        if reduction not in _REDUCTIONS:
            raise ValueError(
                f"reduction: {reduction!r} is not supported by MaskedCrossEntropy. "
                f"Fix: use one of {', '.join(repr(r) for r in _REDUCTIONS)}."
            )
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing: must be in [0, 1), got {label_smoothing}. Fix: use e.g. 0.1.")
        super().__init__(name=name, reduction=reduction, **kwargs)
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id

    def call(self, y_true, y_pred):
        """Per-token smoothed cross-entropy, [batch, length] float32, 0 at padding positions."""
        y_pred = _to_tensor(y_pred)
        ids = self._ids(y_true, y_pred)
        if keras.backend.backend() != "tensorflow":
            losses = _cross_entropy(ids, ops.cast(y_pred, "float32"), self.label_smoothing)
            return ops.where(ops.not_equal(ids, self.pad_id), losses, 0.0)
        logits = tf.cast(y_pred, tf.float32)
        eps = self.label_smoothing
        # TensorFlow's fused kernels compute the loss and its gradient (softmax - q) in one pass. Picking
        # z_y with a gather instead has a gradient that scatters into a [batch, length, vocab] zero tensor,
        # which took a quarter of a training step on CPU.
        if eps:
            vocab_size = tf.shape(logits)[-1]
            uniform = eps / tf.cast(vocab_size, tf.float32)
            smoothed = tf.one_hot(ids, vocab_size, on_value=1.0 - eps + uniform, off_value=uniform)
            losses = tf.nn.softmax_cross_entropy_with_logits(smoothed, logits)
        else:
            losses = tf.nn.sparse_softmax_cross_entropy_with_logits(ids, logits)
        # `where`, not a multiply, so that non-finite logits at padding cannot turn the sum into NaN.
        return tf.where(tf.not_equal(ids, self.pad_id), losses, 0.0)

    def __call__(self, y_true, y_pred, sample_weight=None):
        # Keras' Loss.__call__ would divide by this replica's weight only; this override merges the
        # padding mask into the weights and divides by the replicas' summed weight instead (see above).
        keras_mask = getattr(y_pred, "_keras_mask", None)
        with keras.name_scope(self.name):
            y_pred = _to_tensor(y_pred)
            y_true = _to_tensor(y_true)
            losses = self.call(y_true, y_pred)
            weights = ops.cast(ops.not_equal(self._ids(y_true, y_pred), self.pad_id), "float32")
            if keras_mask is not None:
                weights = weights * ops.cast(ops.reshape(keras_mask, ops.shape(weights)), "float32")
            if sample_weight is not None:
                weights = weights * _broadcast_weights(sample_weight, weights)
            weights = ops.stop_gradient(weights)
            weighted = losses * weights
            if self.reduction in ("none", None):
                return weighted
            if self.reduction == "sum":
                return ops.sum(weighted)
            # sum / (global weight / R), times Keras' 1 / R scaling, is sum / global weight: summed over
            # the replicas (as their gradients are) it is exactly the global batch's weighted mean.
            mean = ops.divide_no_nan(ops.sum(weighted), _weight_per_replica(ops.sum(weights)))
            return _scale_for_replicas(mean)

    @staticmethod
    def _ids(y_true, y_pred):
        ids = _to_tensor(y_true)
        if len(ids.shape) == len(y_pred.shape) and ids.shape[-1] == 1:
            ids = ops.squeeze(ids, -1)  # [batch, length, 1], as some pipelines emit sparse labels
        return ops.cast(ids, "int32")

    def get_config(self):
        return {
            "label_smoothing": self.label_smoothing,
            "pad_id": self.pad_id,
            "name": self.name,
            "reduction": self.reduction,
        }


def _to_tensor(value):
    """A tensor of the backend; under TensorFlow tf's, since keras' convert_to_tensor hands a tf.Variable back."""
    return tf.convert_to_tensor(value) if keras.backend.backend() == "tensorflow" else ops.convert_to_tensor(value)


def _cross_entropy(ids, logits, label_smoothing):
    """The per-token loss with `keras.ops`, for the backends without TensorFlow's fused kernels."""
    if not label_smoothing:
        return ops.sparse_categorical_crossentropy(ids, logits, from_logits=True)
    vocab_size = ops.shape(logits)[-1]
    smoothed = ops.one_hot(ids, vocab_size) * (1.0 - label_smoothing) + label_smoothing / vocab_size
    return ops.categorical_crossentropy(smoothed, logits, from_logits=True)


def _broadcast_weights(sample_weight, weights):
    sample_weight = ops.cast(ops.convert_to_tensor(sample_weight), "float32")
    if len(sample_weight.shape) == len(weights.shape) + 1 and sample_weight.shape[-1] == 1:
        sample_weight = ops.squeeze(sample_weight, -1)
    while len(sample_weight.shape) < len(weights.shape):
        sample_weight = ops.expand_dims(sample_weight, -1)  # [batch] -> [batch, 1]: one weight per sequence
    return ops.broadcast_to(sample_weight, ops.shape(weights))


def _scale_for_replicas(value):
    """`value / num_replicas_in_sync` under a `tf.distribute` strategy with several replicas, else `value`: what
    every Keras loss does (Keras' `scale_loss_for_distribution`, not public API), written the same way (a multiply
    by the reciprocal, not a divide) so that the value is Keras' bit for bit. tf.distribute is TensorFlow's."""
    if keras.backend.backend() != "tensorflow":
        return value
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    if replicas > 1:
        value = ops.multiply(value, ops.cast(1.0 / replicas, value.dtype))
    return value


def _weight_per_replica(local_weight):
    """The replicas' mean summed weight in a replica context, else `local_weight`."""
    # Only inside a replica context (e.g. model.fit's train_step under strategy.run) can the replicas
    # exchange their weights; in cross-replica context one call sees the whole batch, and there Keras'
    # own losses divide by the local count before scaling by 1 / R, so this does the same.
    if keras.backend.backend() != "tensorflow":
        return local_weight
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    context = tf.distribute.get_replica_context()
    if context is None or replicas == 1:
        return local_weight
    return context.all_reduce(tf.distribute.ReduceOp.SUM, local_weight) / float(replicas)
