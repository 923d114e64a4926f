"""tf_transformer.export.client: the requests a model server receives run against the loaded export, and the
clients round-trip through local stand-ins of TensorFlow Serving's REST and gRPC APIs (which call the loaded
signatures the way the server does)."""

import http.server
import json
import re
import socket
import threading
from concurrent import futures

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.export.client import ServedModel, predict_request, rest_request, rest_url, translate_with_server


def as_text(sentence):
    return sentence.decode("utf-8", errors="replace") if isinstance(sentence, bytes) else sentence


def run_request(loaded, request):
    """What TensorFlow Serving does with a PredictRequest: feed each input TensorProto to the signature."""
    signature = loaded.signatures[request.model_spec.signature_name]
    return signature(**{name: tf.constant(tf.make_ndarray(proto)) for name, proto in request.inputs.items()})


def test_the_grpc_request_runs_against_the_signature_with_the_dtypes_a_server_feeds(
    loaded, translator, served_batch, settings
):
    from tensorflow.core.framework import types_pb2

    request = predict_request(served_batch, settings.MODEL_NAME)
    assert (request.model_spec.name, request.model_spec.signature_name) == (settings.MODEL_NAME, "serving_default")
    proto = request.inputs["inputs"]
    assert proto.dtype == types_pb2.DT_STRING
    assert [dim.size for dim in proto.tensor_shape.dim] == [len(served_batch)]
    values = tf.make_ndarray(proto)
    assert values.dtype == object and values.tolist()[-1] == settings.INVALID_UTF8  # bytes as given

    result = run_request(loaded, request)
    expected = translator([as_text(sentence) for sentence in served_batch])
    assert [text.decode("utf-8") for text in result["outputs"].numpy()] == [h[0][0] for h in expected]
    assert result["scores"].numpy().tolist() == [h[0][1] for h in expected]

    n_best = run_request(loaded, predict_request(served_batch[:3], settings.MODEL_NAME, "translate_nbest", version=1))
    assert n_best["outputs"].shape.as_list() == [3, settings.N_BEST]


def test_the_rest_body_is_what_tensorflow_servings_predict_api_takes(settings):
    body = rest_request(["A dog.", "", b"caf\xe9"], "translate_nbest")
    assert body == {"signature_name": "translate_nbest", "instances": ["A dog.", "", "caf\ufffd"]}
    assert json.loads(json.dumps(body)) == body
    assert rest_url("localhost", 8501, "multi30k") == "http://localhost:8501/v1/models/multi30k:predict"
    assert rest_url("h", 1, "m", version=3) == "http://h:1/v1/models/m/versions/3:predict"
    with pytest.raises(ValueError, match="signature: 'translate_ids' does not take text"):
        rest_request(["x"], "translate_ids")


def row_format(outputs):
    """TensorFlow Serving's REST answer to an "instances" request: one object per row, strings as text."""

    def plain(value):
        if isinstance(value, np.ndarray):
            return [plain(item) for item in value]
        return value.decode("utf-8") if isinstance(value, bytes) else value.item()

    arrays = {name: tensor.numpy() for name, tensor in outputs.items()}
    rows = len(next(iter(arrays.values())))
    return {"predictions": [{name: plain(array[row]) for name, array in arrays.items()} for row in range(rows)]}


@pytest.fixture(scope="module")
def rest_server(loaded, settings):
    """A stand-in for the REST API on 127.0.0.1: POST /v1/models/NAME[/versions/N]:predict."""
    received = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.path, body))
            match = re.fullmatch(r"/v1/models/(\w+)(/versions/\d+)?:predict", self.path)
            if not match or match.group(1) != settings.MODEL_NAME:
                return self.answer(404, {"error": f"Servable not found for request: Latest({self.path})"})
            signature = self.server.loaded.signatures[body["signature_name"]]
            instances = [text.encode("utf-8") for text in body["instances"]]
            self.answer(200, row_format(signature(inputs=tf.constant(instances, tf.string))))

        def answer(self, code, payload):
            data = json.dumps(payload).encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.loaded = loaded
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], received
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def grpc_server(loaded):
    """A stand-in for the gRPC PredictionService on 127.0.0.1."""
    import grpc
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    received = []

    class Servicer(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):
            received.append(request)
            response = predict_pb2.PredictResponse()
            for name, tensor in run_request(loaded, request).items():
                response.outputs[name].CopyFrom(tf.make_tensor_proto(tensor.numpy()))
            return response

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port, received
    server.stop(None)


def chunked(loaded, signature, sentences, size):
    """The signature called on each chunk of `size` sentences: what the clients' requests ask for."""
    results = []
    for start in range(0, len(sentences), size):
        batch = [sentence.encode("utf-8") for sentence in sentences[start : start + size]]
        output = loaded.signatures[signature](inputs=tf.constant(batch, tf.string))
        texts = output["outputs"].numpy().reshape(len(batch), -1)
        scores = output["scores"].numpy().reshape(len(batch), -1)
        for row_texts, row_scores in zip(texts, scores, strict=True):
            results.append([(t.decode("utf-8"), float(s)) for t, s in zip(row_texts, row_scores, strict=True)])
    return results


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_the_clients_round_trip_through_a_model_server(protocol, rest_server, grpc_server, loaded, sentences, settings):
    port, received = rest_server if protocol == "rest" else grpc_server
    before = len(received)
    for signature in ("serving_default", "translate_nbest"):
        served = ServedModel(
            settings.MODEL_NAME, protocol=protocol, host="127.0.0.1", port=port, signature_name=signature
        )
        results = translate_with_server(sentences, served, batch_size=4)
        assert results == chunked(loaded, signature, sentences, 4)  # exactly: the same requests
        assert len(results[0]) == (1 if signature == "serving_default" else settings.N_BEST)
    assert len(received) - before == 2 * 3  # 9 sentences, 4 a request
    if protocol == "rest":
        assert received[-1] == (
            f"/v1/models/{settings.MODEL_NAME}:predict",
            {"signature_name": "translate_nbest", "instances": sentences[8:]},
        )
    else:
        assert received[-1].model_spec.name == settings.MODEL_NAME
        assert tf.make_ndarray(received[-1].inputs["inputs"]).tolist() == [s.encode("utf-8") for s in sentences[8:]]


def test_client_errors_name_the_problem_and_the_fix(rest_server):
    with pytest.raises(RuntimeError, match="HTTP 404: .*Servable not found.*Fix: check --model_name"):
        translate_with_server(["A dog."], ServedModel("other_model", port=rest_server[0], host="127.0.0.1"))
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    for protocol in ("rest", "grpc"):
        with pytest.raises(ConnectionError, match="cannot reach a model server.*Fix: start TensorFlow Serving"):
            served = ServedModel("m", protocol=protocol, host="127.0.0.1", port=free_port, timeout=10)
            translate_with_server(["A dog."], served)
    with pytest.raises(ValueError, match="protocol: unknown protocol 'http'"):
        translate_with_server(["A dog."], ServedModel("m", protocol="http"))
