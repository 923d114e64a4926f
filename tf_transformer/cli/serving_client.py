"""Translates sentences with a running TensorFlow Serving model server that serves an export of tft-export.

    tft-serving-client --model_name=multi30k "A dog runs on the beach." "Two men talk."
    tft-serving-client --model_name=multi30k --protocol=grpc --input=../shared/data/multi30k/val.en.gz > val.hyp.de

REST (`POST http://HOST:8501/v1/models/NAME:predict` with {"signature_name": ..., "instances": [...]}) or
gRPC (`PredictionService.Predict` on HOST:8500). Sentences come from the arguments, else from --input (plain
or gzip), else stdin, one a line; --batch_size sentences go in each request. It prints one translation a
line in input order, or with --signature=translate_nbest `i ||| translation ||| score` lines, as
tft-translate. The work is `tf_transformer.export.translate_with_server`.
"""

import logging as pylogging
import sys

from absl import flags

from tf_transformer.cli import exit_on, run_binary
from tf_transformer.export.client import PROTOCOLS, TEXT_SIGNATURES, ServedModel, translate_with_server  # no TF

_MODEL_NAME = flags.DEFINE_string("model_name", None, "The served model's name (MODEL_NAME).", required=True)
_PROTOCOL = flags.DEFINE_enum("protocol", "rest", list(PROTOCOLS), "rest (port 8501) or grpc (port 8500).")
_HOST = flags.DEFINE_string("host", "localhost", "The model server's host.")
_REST_PORT = flags.DEFINE_integer("rest_port", 8501, "The server's REST port (--rest_api_port).")
_GRPC_PORT = flags.DEFINE_integer("grpc_port", 8500, "The server's gRPC port (--port).")
_SIGNATURE = flags.DEFINE_enum("signature", "serving_default", list(TEXT_SIGNATURES), "Which signature to call.")
_MODEL_VERSION = flags.DEFINE_integer("model_version", None, "A version to ask for (default: the server's latest).")
_INPUT = flags.DEFINE_string("input", None, "Sentences, one a line, plain or gzip (without arguments; default stdin).")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Sentences per request.")
_TIMEOUT = flags.DEFINE_float("timeout", 60.0, "Seconds to wait for each answer.")


def main(argv):
    pylogging.getLogger("absl").setLevel(pylogging.WARNING)  # TensorFlow's INFO lines; ours stay
    # Imported here, not at the top: --help must not import TensorFlow.
    from tf_transformer.data.text_files import read_sentences
    from tf_transformer.decoding.text import format_results

    with exit_on(ConnectionError, RuntimeError, FileNotFoundError, ValueError):
        if len(argv) > 1 and _INPUT.value is not None:
            raise ValueError("give sentences as arguments or --input, not both.")
        sentences = list(argv[1:]) if len(argv) > 1 else read_sentences(_INPUT.value, "--input")
        port = _REST_PORT.value if _PROTOCOL.value == "rest" else _GRPC_PORT.value
        served = ServedModel(
            _MODEL_NAME.value, protocol=_PROTOCOL.value, host=_HOST.value, port=port,
            signature_name=_SIGNATURE.value, version=_MODEL_VERSION.value, timeout=_TIMEOUT.value,
        )  # fmt: skip
        results = translate_with_server(sentences, served, batch_size=_BATCH_SIZE.value)
    lines = format_results(results, scored=_SIGNATURE.value == "translate_nbest")
    sys.stdout.buffer.write("".join(line + "\n" for line in lines).encode("utf-8"))
    sys.stdout.flush()


def run():
    """The `tft-serving-client` command (its console script and the checkout's wrapper script call it)."""
    run_binary(__name__, main)


if __name__ == "__main__":
    run()
