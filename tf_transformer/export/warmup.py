"""TensorFlow Serving warmup requests: `assets.extra/tf_serving_warmup_requests`, a TFRecord file of
`PredictionLog` records that the server replays when it loads a model version, before it takes traffic.

The first run of a graph pays for its kernels' setup (and, for a beam search, for the first trip through
the while loop); warming up moves that cost from the first user's request to load time.
"""

from __future__ import annotations

import os
import pathlib
from typing import List, Sequence, Union

import numpy as np
import tensorflow as tf

from tf_transformer.export.client import ids_predict_request, predict_request

PathLike = Union[str, os.PathLike]


def warmup_requests(sentences: Sequence[str], tokenizer, model_name: str = "") -> list:
    """`PredictionLog` records for an export: serving_default with one sentence and with a mixed batch (the
    sentences and an empty one), translate_nbest with the sentences, translate_ids with their token ids."""
    from tensorflow_serving.apis import prediction_log_pb2

    sentences = list(sentences)
    requests = [
        predict_request(sentences[:1], model_name, "serving_default"),
        predict_request(sentences + [""], model_name, "serving_default"),
        predict_request(sentences, model_name, "translate_nbest"),
    ]
    source_ids = tokenizer.tokenize(sentences).to_tensor().numpy().astype(np.int32)
    requests.append(ids_predict_request(source_ids, model_name))
    return [prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=r)) for r in requests]


def write_warmup_requests(path: PathLike, sentences: Sequence[str], tokenizer, model_name: str = "") -> pathlib.Path:
    """Writes `warmup_requests(...)` as a TFRecord file at `path` (its folder is created)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for log in warmup_requests(sentences, tokenizer, model_name):
            writer.write(log.SerializeToString())
    return path


def read_warmup_requests(path: PathLike) -> List:
    """The `PredictionLog` records of a warmup file."""
    from tensorflow_serving.apis import prediction_log_pb2

    return [
        prediction_log_pb2.PredictionLog.FromString(record.numpy()) for record in tf.data.TFRecordDataset(str(path))
    ]
