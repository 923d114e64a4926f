"""`DataError`: the one exception the data package raises for bad input files, corpora or vocabularies."""


class DataError(ValueError):
    """Input data cannot be used as given; the message names the file (and line) and the fix."""
