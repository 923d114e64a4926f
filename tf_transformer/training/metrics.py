"""Token accuracy over the non-padding target tokens."""

from __future__ import annotations

import keras
from keras import ops

from tf_transformer.training.losses import _to_tensor


@keras.saving.register_keras_serializable(package="tf_transformer")
class MaskedAccuracy(keras.metrics.Metric):
    """The fraction of non-padding target tokens whose argmax logit is the target, over all batches.

    Two float32 sums are accumulated, `correct` and `total` (the non-padding tokens, each weighted by
    `sample_weight` when one is given), and `result()` is `correct / total` (0 before any token).
    Accumulating counts rather than averaging per-batch accuracies weights every token equally,
    however the padding is spread over the batches (as the per-token loss of Vaswani et al., 2017 is).

    Args:
        pad_id: the target id that marks padding; those positions are not counted.
        name: the metric name.
        **kwargs: other `keras.metrics.Metric` arguments.

    Call args (`update_state`):
        y_true: int target ids, [batch, length] (a trailing axis of size 1 is accepted).
        y_pred: logits (or probabilities), [batch, length, vocab], any float dtype.
        sample_weight: optional weights broadcastable to [batch, length], e.g. [batch] per sequence.

    Returns (`result`):
        A float32 scalar in [0, 1].

    Example:

    >>> metric = MaskedAccuracy()
    >>> logits = keras.ops.one_hot([[4, 2, 0]], 6)   # predicts 4, 2, 0
    >>> metric.update_state([[4, 3, 0]], logits)     # the last token is padding
    >>> float(metric.result())
    0.5
    """

    def __init__(self, pad_id=0, name="masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = pad_id
        self.correct = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="correct")
        self.total = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = _to_tensor(y_pred)
        ids = _to_tensor(y_true)
        if len(ids.shape) == len(y_pred.shape) and ids.shape[-1] == 1:
            ids = ops.squeeze(ids, -1)
        ids = ops.cast(ids, "int32")
        predicted = ops.cast(ops.argmax(y_pred, axis=-1), "int32")
        weights = ops.cast(ops.not_equal(ids, self.pad_id), "float32")
        if sample_weight is not None:
            sample_weight = ops.cast(ops.convert_to_tensor(sample_weight), "float32")
            if len(sample_weight.shape) == len(weights.shape) + 1 and sample_weight.shape[-1] == 1:
                sample_weight = ops.squeeze(sample_weight, -1)
            while len(sample_weight.shape) < len(weights.shape):
                sample_weight = ops.expand_dims(sample_weight, -1)  # one weight per sequence
            weights = weights * sample_weight
        hits = ops.cast(ops.equal(predicted, ids), "float32")
        self.correct.assign_add(ops.sum(hits * weights))
        self.total.assign_add(ops.sum(ops.broadcast_to(weights, ops.shape(hits))))

    def result(self):
        return ops.divide_no_nan(self.correct, self.total)

    def reset_state(self):
        self.correct.assign(0.0)
        self.total.assign(0.0)

    def get_config(self):
        return {"pad_id": self.pad_id, "name": self.name, "dtype": self.dtype}


@keras.saving.register_keras_serializable(package="tf_transformer")
class TokenCount(keras.metrics.Metric):
    """The number of non-padding target tokens seen since the last reset (for tokens/s).

    Args:
        pad_id: the padding id, not counted.
        name: the metric name.

    Call arguments (`update_state`):
        y_true: int target ids `[batch, length]`.
        y_pred: ignored (any shape).

    Returns:
        `result()`: a float32 scalar count.

    Example:

    >>> count = TokenCount()
    >>> count.update_state([[5, 6, 0]], None)
    >>> float(count.result())
    2.0

    Reference: the paper reports batches in source + target tokens (section 5.1).
    """

    def __init__(self, pad_id=0, name="target_tokens", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = pad_id
        self.count = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="count")

    def update_state(self, y_true, y_pred=None, sample_weight=None):
        tokens = ops.sum(ops.cast(ops.not_equal(_to_tensor(y_true), self.pad_id), "float32"))
        self.count.assign_add(tokens)

    def result(self):
        return ops.copy(self.count)  # the value now, not the variable

    def reset_state(self):
        self.count.assign(0.0)

    def get_config(self):
        return {"pad_id": self.pad_id, "name": self.name, "dtype": self.dtype}
