"""Trains one SentencePiece model in a child process of `vocab.train_sentencepiece` (run as a script, by path).

Input: the trainer's options as one JSON argument, and the sentences on stdin, one JSON string a line (exact
for any text, newlines included). Output: the model's bytes on stdout, exit status 0; or SentencePiece's
error as a JSON string on the last line of stderr, exit status 1. Imports only the standard library and
sentencepiece: no TensorFlow to start, and run by path so that nothing of the package is imported.
"""

import json
import os
import signal
import sys


def main() -> int:
    options = json.loads(sys.argv[1])
    _die_with_parent(options.pop("parent_pid"))
    # The parent decides what a Ctrl-C does (it kills this process); the terminal sends it to both.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The model goes to the real stdout; anything else written to fd 1 (a C++ log line) goes to stderr.
    output = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    import sentencepiece

    seed = options.pop("seed")
    if seed is not None:
        sentencepiece.set_random_generator_seed(seed)
    sentences = (json.loads(line) for line in sys.stdin.buffer)
    model = _BytesSink()
    try:
        sentencepiece.SentencePieceTrainer.train(sentence_iterator=sentences, model_writer=model, **options)
    except RuntimeError as error:
        print(json.dumps(str(error)), file=sys.stderr)  # the last line, whatever the C++ logged before it
        return 1
    output.write(model.getvalue())
    output.close()
    return 0


def _die_with_parent(parent_pid: int) -> None:
    """Has Linux kill this process when its parent dies (`kill -9`, or a SIGTERM that no handler catches),
    instead of letting it train on for minutes into a pipe that nobody reads."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the child ends when it writes to the closed pipe
        return
    if os.getppid() != parent_pid:  # the parent died before prctl: nobody will read the model
        os._exit(1)


class _BytesSink:
    """What SentencePiece's `model_writer` needs: a `write(bytes)`."""

    def __init__(self):
        self._parts = []

    def write(self, data: bytes):
        self._parts.append(data)

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


if __name__ == "__main__":
    # Run by path, Python put this file's folder first on the path: its modules must not shadow any import.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != _here]
    sys.exit(main())
