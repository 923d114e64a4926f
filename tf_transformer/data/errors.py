"""`DataError`: the one exception the data package raises for bad input files, corpora or vocabularies; and
`VocabularyInterrupted`, a signal while a vocabulary was being built."""

import signal


class DataError(ValueError):
    """Input data cannot be used as given; the message names the file (and line) and the fix."""


class VocabularyInterrupted(Exception):
    """SIGTERM or SIGINT stopped the building of a vocabulary; nothing of it is kept, a restart builds it again.

    `signal_number` is the signal; the convention for the process's exit status is `128 + signal_number`.
    """

    def __init__(self, signal_number: int, vocab_dir):
        self.signal_number = signal_number
        super().__init__(
            f"{signal.Signals(signal_number).name} received while building the vocabulary in {vocab_dir}: stopped "
            "before it was complete, so nothing of it is used. Run the same command again to build it."
        )
