"""Clients of a TensorFlow Serving model server that serves an export: REST and gRPC.

    results = translate_with_server(["A dog runs.", ""], ServedModel("multi30k", protocol="grpc"))
    results[0]   # [("Ein Hund rennt.", -0.42)]: n-best (text, score) pairs, best first, as translate_texts

The request builders (`rest_request`, `predict_request`) and response parsers are separate from the
sending, so what a server receives can be checked without one.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from typing import List, Optional, Sequence, Tuple

import numpy as np

PROTOCOLS = ("rest", "grpc")
TEXT_SIGNATURES = ("serving_default", "translate_nbest")
DEFAULT_PORTS = {"rest": 8501, "grpc": 8500}

Results = List[List[Tuple[str, float]]]


@dataclasses.dataclass(frozen=True)
class ServedModel:
    """A model a TensorFlow Serving model server serves, and how to ask it; checked when built.

    Attributes:
        model_name: the served model's name (the server's MODEL_NAME / --model_name).
        protocol: "rest" or "grpc".
        host, port: the server; port None (the default) becomes the protocol's (REST 8501, gRPC 8500).
        signature_name: "serving_default" (the best translation) or "translate_nbest".
        version: a version number to ask for; None for the server's choice (the latest).
        timeout: seconds per request.

    Raises:
        ValueError: a bad protocol or signature.

    Example:

    >>> ServedModel("multi30k", protocol="grpc").port
    8500
    """

    model_name: str
    protocol: str = "rest"
    host: str = "localhost"
    port: Optional[int] = None
    signature_name: str = "serving_default"
    version: Optional[int] = None
    timeout: float = 60.0

    def __post_init__(self):
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol: unknown protocol {self.protocol!r}. Fix: use one of {', '.join(PROTOCOLS)}.")
        _check_signature(self.signature_name)
        if self.port is None:
            object.__setattr__(self, "port", DEFAULT_PORTS[self.protocol])


def rest_url(host: str, port: int, model_name: str, version: Optional[int] = None) -> str:
    """`http://HOST:PORT/v1/models/NAME[/versions/N]:predict`, TensorFlow Serving's REST predict API."""
    versioned = f"/versions/{version}" if version is not None else ""
    return f"http://{host}:{port}/v1/models/{model_name}{versioned}:predict"


def rest_request(sentences: Sequence[str], signature_name: str = "serving_default") -> dict:
    """The JSON body of a REST predict request in the row ("instances") format: one string per instance."""
    _check_signature(signature_name)
    return {"signature_name": signature_name, "instances": [_as_text(sentence) for sentence in sentences]}


def parse_rest_response(body: dict) -> Results:
    """(text, score) lists from a REST predict response: `{"predictions": [{"outputs": ..., "scores": ...}]}`,
    a string and a number each for serving_default, lists of them for translate_nbest."""
    if "error" in body:
        raise RuntimeError(f"the model server answered: {body['error']}")
    results = []
    for prediction in body["predictions"]:
        texts, scores = prediction["outputs"], prediction["scores"]
        if isinstance(texts, str):
            texts, scores = [texts], [scores]
        results.append([(text, float(score)) for text, score in zip(texts, scores, strict=True)])
    return results


def predict_request(
    sentences: Sequence[str],
    model_name: str,
    signature_name: str = "serving_default",
    version: Optional[int] = None,
):
    """A `tensorflow_serving.apis.predict_pb2.PredictRequest`: input "inputs", a tf.string tensor [batch]."""
    import tensorflow as tf

    _check_signature(signature_name)
    values = np.array([_as_bytes(sentence) for sentence in sentences], dtype=object)
    inputs = tf.make_tensor_proto(values, dtype=tf.string, shape=[len(values)])
    return _request(model_name, signature_name, version, inputs=inputs)


def ids_predict_request(source_ids, model_name: str, version: Optional[int] = None):
    """A `PredictRequest` for translate_ids: input "source_ids", int32 [batch, source_len], 0-padded."""
    import tensorflow as tf

    return _request(model_name, "translate_ids", version, source_ids=tf.make_tensor_proto(source_ids, tf.int32))


def _request(model_name, signature_name, version, **inputs):
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    if version is not None:
        request.model_spec.version.value = version
    for name, tensor in inputs.items():
        request.inputs[name].CopyFrom(tensor)
    return request


def parse_predict_response(response) -> Results:
    """(text, score) lists from a `PredictResponse` of serving_default ([batch]) or translate_nbest ([batch, n])."""
    import tensorflow as tf

    texts = tf.make_ndarray(response.outputs["outputs"])
    scores = tf.make_ndarray(response.outputs["scores"])
    if texts.ndim == 1:
        texts, scores = texts[:, np.newaxis], scores[:, np.newaxis]
    return [
        [(text.decode("utf-8", errors="replace"), float(score)) for text, score in zip(row, row_scores, strict=True)]
        for row, row_scores in zip(texts, scores, strict=True)
    ]


def translate_rest(sentences: Sequence[str], served: ServedModel) -> Results:
    """Sends one REST predict request (`POST /v1/models/NAME:predict`) to `served` (its protocol is not read)
    and parses the answer.

    Raises:
        ConnectionError: no server answers at host:port.
        RuntimeError: the server refused the request (its message is included).
    """
    if not sentences:
        return []
    url = rest_url(served.host, served.port, served.model_name, served.version)
    data = json.dumps(rest_request(sentences, served.signature_name)).encode("utf-8")
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=served.timeout) as answer:
            body = json.loads(answer.read().decode("utf-8"))
    except urllib.error.HTTPError as error:
        detail = error.read().decode("utf-8", errors="replace")
        raise RuntimeError(
            f"the model server at {url} answered HTTP {error.code}: {detail.strip()[:1000]}. Fix: check --model_name "
            "and --signature against the served model (GET /v1/models/NAME/metadata lists its signatures)."
        ) from None
    except (urllib.error.URLError, OSError) as error:
        raise ConnectionError(
            f"cannot reach a model server at {url} ({getattr(error, 'reason', error)}). Fix: start TensorFlow Serving "
            "with the export (see README, Export and serve), or pass its --host and --rest_port."
        ) from None
    return parse_rest_response(body)


def translate_grpc(sentences: Sequence[str], served: ServedModel) -> Results:
    """Sends one gRPC `PredictionService.Predict` request to `served` (its protocol is not read) and parses the
    answer.

    Raises:
        ConnectionError: no server answers at host:port.
        RuntimeError: the server refused the request (its message is included).
    """
    if not sentences:
        return []
    import grpc
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    request = predict_request(sentences, served.model_name, served.signature_name, served.version)
    host, port = served.host, served.port
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        try:
            response = stub.Predict(request, timeout=served.timeout)
        except grpc.RpcError as error:
            if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise ConnectionError(
                    f"cannot reach a model server at {host}:{port} over gRPC ({error.code().name}: {error.details()}). "
                    "Fix: start TensorFlow Serving with the export (see README, Export and serve), or pass its --host "
                    "and --grpc_port."
                ) from None
            raise RuntimeError(
                f"the model server at {host}:{port} answered {error.code().name}: {error.details()}. Fix: check "
                "--model_name and --signature against the served model."
            ) from None
    return parse_predict_response(response)


def translate_with_server(sentences: Sequence[str], served: ServedModel, batch_size: int = 64) -> Results:
    """Translates str `sentences` with `served`'s model server, `batch_size` sentences a request: one list of
    (text, score) pairs per sentence, in input order (one pair for serving_default, n_best for translate_nbest).
    A ValueError for a bad batch size; ConnectionError, RuntimeError: see `translate_rest`."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size: must be an int >= 1, got {batch_size!r}. Fix: use e.g. 64.")
    send = translate_rest if served.protocol == "rest" else translate_grpc
    results: Results = []
    for start in range(0, len(sentences), batch_size):
        results.extend(send(list(sentences[start : start + batch_size]), served))
    return results


def _check_signature(signature_name: str) -> None:
    if signature_name not in TEXT_SIGNATURES:
        raise ValueError(
            f"signature: {signature_name!r} does not take text. Fix: use one of {', '.join(TEXT_SIGNATURES)} "
            "(translate_ids takes token ids: call it with your own request)."
        )


def _as_text(sentence) -> str:
    return sentence.decode("utf-8", errors="replace") if isinstance(sentence, bytes) else str(sentence)


def _as_bytes(sentence) -> bytes:
    return sentence if isinstance(sentence, bytes) else str(sentence).encode("utf-8")
