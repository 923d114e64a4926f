"""A subword vocabulary in use: `Tokenizer`, text <-> ids with tensorflow-text ops, and the ids it reserves.

Both kinds (a joint SentencePiece model, the default, or WordPiece) reserve the ids `TransformerConfig` expects:
0 padding, 1 start of sequence (BOS), 2 end of sequence (EOS), 3 unknown. A vocabulary lives in a folder:
`spm.model` + `spm.vocab` (SentencePiece) or `wordpiece.vocab` (WordPiece), and `tokenizer.json` saying which,
written last so a folder that has it is complete. `Tokenizer.from_directory` loads either; data/vocab.py builds
one.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import List, Optional, Sequence, Tuple, Union

import tensorflow as tf

from tf_transformer.config import ConfigError
from tf_transformer.data.errors import DataError
from tf_transformer.files import write_atomically
from tf_transformer.model_dir import VOCAB_RECORD

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SENTENCEPIECE_SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
WORDPIECE_SPECIAL_TOKENS = ("[PAD]", "[BOS]", "[EOS]", "[UNK]")
SENTENCEPIECE_MODEL = "spm.model"
SENTENCEPIECE_VOCAB = "spm.vocab"
WORDPIECE_VOCAB = "wordpiece.vocab"
TOKENIZER_JSON = VOCAB_RECORD  # written last: its presence says the vocabulary is complete

PathLike = Union[str, os.PathLike]


class Tokenizer(tf.Module):
    """Text <-> subword ids with tensorflow-text ops, so it runs in tf.data, `tf.function` and a SavedModel.

    Ids 0, 1, 2, 3 are padding, BOS, EOS and unknown. `tokenize` adds no BOS or EOS: the pipeline adds them.

    SentencePiece (`from_sentencepiece`): `tensorflow_text.SentencepieceTokenizer` on the model's bytes,
    deterministic (no sampling). Detokenizing gives back the text as the model normalised it (see
    `train_sentencepiece`; for the default "nmt_nfkc" rule: NFKC, and runs of spaces made one).

    WordPiece (`from_wordpiece`): `tensorflow_text.BertTokenizer`, which first splits text into words at
    whitespace and punctuation (and, with `lower_case`, lowercases and strips accents), then into word
    pieces. Detokenizing joins the words with single spaces, so "a dog." comes back as "a dog ." — the
    round trip is exact up to that word split.

    Example:
        tokenizer = Tokenizer.from_directory("vocab/")
        ids = tokenizer.tokenize(["A dog runs.", "Ein Hund rennt."])   # tf.RaggedTensor int32 [2, (tokens)]
        tokenizer.detokenize(ids)                                      # tf.string [2]

    Attributes:
        kind: "sentencepiece" or "wordpiece".
        vocab_size: the number of ids, special tokens included (a Python int).
        pad_id, bos_id, eos_id, unk_id: 0, 1, 2, 3.
    """

    pad_id, bos_id, eos_id, unk_id = PAD_ID, BOS_ID, EOS_ID, UNK_ID

    def __init__(self, kind: str, tokenizer, vocab_size: int, options: Optional[dict] = None, name=None):
        """Use `from_sentencepiece`, `from_wordpiece` or `from_directory`."""
        super().__init__(name=name or f"{kind}_tokenizer")
        self.kind = kind
        self.vocab_size = int(vocab_size)
        self._tokenizer = tokenizer
        self._options = dict(options or {})

    # ----------------------------------------------------------------------------------------- constructors

    @classmethod
    def from_sentencepiece(cls, model: Union[bytes, PathLike]) -> "Tokenizer":
        """A tokenizer from a SentencePiece model (its bytes or its file).

        Raises:
            DataError: the model's special ids are not pad 0, BOS 1, EOS 2, unknown 3.
        """
        import sentencepiece

        if not isinstance(model, bytes):
            model = pathlib.Path(model).read_bytes()
        processor = sentencepiece.SentencePieceProcessor(model_proto=model)
        ids = (processor.pad_id(), processor.bos_id(), processor.eos_id(), processor.unk_id())
        if ids != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
            raise DataError(
                f"the SentencePiece model uses pad/bos/eos/unk ids {ids}, but tf_transformer needs (0, 1, 2, 3). "
                "Fix: train it with tft-build-vocab (or pad_id=0 bos_id=1 eos_id=2 unk_id=3)."
            )
        return cls._sentencepiece(model, processor.get_piece_size())

    @classmethod
    def _sentencepiece(cls, model: bytes, vocab_size: int, **sampling) -> "Tokenizer":
        """The tokenizer of a checked SentencePiece model; `sampling` (nbest_size, alpha) for `sampling`."""
        from tf_transformer.data._tf_text_private import shared_sentencepiece_tokenizer

        # Not tf-text's own: its model resource would not survive tf.random.set_seed (see the module).
        tokenizer = shared_sentencepiece_tokenizer(model, out_type=tf.int32, add_bos=False, add_eos=False, **sampling)
        return cls("sentencepiece", tokenizer, vocab_size, {"model": model})

    @classmethod
    def from_wordpiece(
        cls, vocab: Union[Sequence[str], PathLike], lower_case: bool = False, normalization_form: Optional[str] = "NFKC"
    ) -> "Tokenizer":
        """A tokenizer from a WordPiece vocabulary (a list of tokens or a file with one a line).

        `lower_case` and `normalization_form` must be those the vocabulary was learned with.

        Raises:
            DataError: the first four tokens are not [PAD] [BOS] [EOS] [UNK].
        """
        import tensorflow_text as text

        if isinstance(vocab, (str, os.PathLike)):
            vocab = pathlib.Path(vocab).read_text(encoding="utf-8").split("\n")
            vocab = vocab[:-1] if vocab and vocab[-1] == "" else vocab
        vocab = list(vocab)
        if tuple(vocab[:4]) != WORDPIECE_SPECIAL_TOKENS:
            raise DataError(
                f"the WordPiece vocabulary starts with {vocab[:4]}, but ids 0..3 must be {WORDPIECE_SPECIAL_TOKENS}. "
                "Fix: build it with tft-build-vocab --vocab_type=wordpiece."
            )
        table = tf.lookup.StaticVocabularyTable(
            tf.lookup.KeyValueTensorInitializer(vocab, tf.range(len(vocab), dtype=tf.int64)), num_oov_buckets=1
        )
        tokenizer = text.BertTokenizer(
            table,
            token_out_type=tf.int64,
            unknown_token=WORDPIECE_SPECIAL_TOKENS[UNK_ID],
            lower_case=lower_case,
            normalization_form=None if lower_case else normalization_form,
        )
        options = {"vocab": tuple(vocab), "lower_case": lower_case, "normalization_form": normalization_form}
        return cls("wordpiece", tokenizer, len(vocab), options)

    @classmethod
    def from_directory(cls, path: PathLike) -> "Tokenizer":
        """Loads the vocabulary that `save` (or `build_vocabulary`) wrote into `path`.

        Raises:
            DataError: the folder holds no vocabulary.
        """
        path = pathlib.Path(path)
        meta_path = path / TOKENIZER_JSON
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        kind = meta.get("type") or (
            "sentencepiece"
            if (path / SENTENCEPIECE_MODEL).is_file()
            else "wordpiece"
            if (path / WORDPIECE_VOCAB).is_file()
            else None
        )
        if kind == "sentencepiece":
            return cls.from_sentencepiece(path / SENTENCEPIECE_MODEL)
        if kind == "wordpiece":
            return cls.from_wordpiece(
                path / WORDPIECE_VOCAB,
                lower_case=meta.get("lower_case", False),
                normalization_form=meta.get("normalization_form", "NFKC"),
            )
        raise DataError(
            f"{path}: no vocabulary ({SENTENCEPIECE_MODEL} or {WORDPIECE_VOCAB}). Fix: build one with "
            f"tft-build-vocab --output_dir={path}."
        )

    def sampling(self, nbest_size: int, alpha: float) -> "Tokenizer":
        """This vocabulary, sampling a segmentation anew on every call (subword regularization, Kudo 2018): for
        training batches only; detokenizing any sample gives the text back.

        Args: `nbest_size`, how many best segmentations to sample from (negative: all); `alpha`, the power their
        probabilities are raised to (lower: flatter, more varied). Raises a ConfigError for a WordPiece
        vocabulary, which has one segmentation only."""
        if self.kind != "sentencepiece":
            raise ConfigError(
                "subword_nbest_size: sampling segmentations needs a SentencePiece vocabulary, this one is "
                f"{self.kind}. Fix: use --vocab_type=sentencepiece, or --override=subword_nbest_size=0."
            )
        return self._sentencepiece(self._options["model"], self.vocab_size, nbest_size=nbest_size, alpha=alpha)

    def save(self, directory: PathLike, extra: Optional[dict] = None) -> pathlib.Path:
        """Writes the vocabulary files and `tokenizer.json` (with `extra` facts) into `directory`, atomically."""
        directory = pathlib.Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        meta = {"type": self.kind, "vocab_size": self.vocab_size}
        if self.kind == "sentencepiece":
            import sentencepiece

            model = self._options["model"]
            processor = sentencepiece.SentencePieceProcessor(model_proto=model)
            pieces = (f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n" for i in range(self.vocab_size))
            write_atomically(directory / SENTENCEPIECE_MODEL, model)
            write_atomically(directory / SENTENCEPIECE_VOCAB, "".join(pieces).encode("utf-8"))
            meta["model_file"] = SENTENCEPIECE_MODEL
        else:
            vocab = self._options["vocab"]
            write_atomically(directory / WORDPIECE_VOCAB, "".join(f"{token}\n" for token in vocab).encode("utf-8"))
            meta.update(
                vocab_file=WORDPIECE_VOCAB,
                lower_case=self._options["lower_case"],
                normalization_form=self._options["normalization_form"],
            )
        meta["special_tokens"] = list(self.special_tokens)
        meta.update(extra or {})
        write_atomically(directory / TOKENIZER_JSON, (json.dumps(meta, indent=2) + "\n").encode("utf-8"))
        return directory

    # ----------------------------------------------------------------------------------------- the ops

    @property
    def special_tokens(self) -> Tuple[str, str, str, str]:
        """The tokens of ids 0..3 (padding, BOS, EOS, unknown)."""
        return SENTENCEPIECE_SPECIAL_TOKENS if self.kind == "sentencepiece" else WORDPIECE_SPECIAL_TOKENS

    def tokenize(self, strings) -> Union[tf.RaggedTensor, tf.Tensor]:
        """Subword ids of UTF-8 strings, without BOS or EOS.

        Args: a string, or a 1-D batch (a list or `tf.string` tensor); another rank raises a ValueError.
        Returns: int32, a `tf.RaggedTensor` [batch, (tokens)] for a batch, a 1-D `tf.Tensor` for one string.
        """
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        if strings.shape.rank == 0:
            return self._tokenize_batch(strings[tf.newaxis])[0]
        if strings.shape.rank != 1:
            raise ValueError(f"tokenize: expected a string or a 1-D batch of strings, got shape {strings.shape}.")
        return self._tokenize_batch(strings)

    def _tokenize_batch(self, strings: tf.Tensor) -> tf.RaggedTensor:
        if self.kind == "sentencepiece":
            return self._tokenizer.tokenize(strings)
        # BertTokenizer gives [batch, (words), (pieces)]; the model wants one sequence per string.
        return tf.cast(self._tokenizer.tokenize(strings).merge_dims(1, 2), tf.int32)

    def tokenize_with_offsets(self, strings) -> Tuple[tf.RaggedTensor, tf.RaggedTensor, tf.RaggedTensor]:
        """`(ids, starts, ends)`: the ids of `tokenize` for a 1-D batch of strings, with each piece's span in the
        input as UTF-8 byte offsets (int64 `[batch, (tokens)]`, end exclusive). A SentencePiece piece that begins
        with its word's space marker starts at that space; the byte pieces of one character share its span."""
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        if strings.shape.rank != 1:
            raise ValueError(f"tokenize_with_offsets: expected a 1-D batch of strings, got shape {strings.shape}.")
        ids, starts, ends = self._tokenizer.tokenize_with_offsets(strings)
        if self.kind == "wordpiece":  # [batch, (words), (pieces)], as in _tokenize_batch
            ids, starts, ends = (tensor.merge_dims(1, 2) for tensor in (ids, starts, ends))
        return tf.cast(ids, tf.int32), tf.cast(starts, tf.int64), tf.cast(ends, tf.int64)

    def detokenize(self, ids) -> tf.Tensor:
        """Text of id sequences; ids 0 (padding) and 1 (BOS) are skipped, and an EOS (2) ends the text.

        Args:
            ids: int ids, 1-D [tokens], 2-D [batch, tokens] (0-padded) or a `tf.RaggedTensor` [batch, (tokens)].

        Returns:
            tf.string: a scalar for 1-D input, else [batch].
        """
        if isinstance(ids, tf.RaggedTensor):
            return self._detokenize_batch(tf.cast(ids, tf.int32))
        ids = tf.cast(tf.convert_to_tensor(ids), tf.int32)
        if ids.shape.rank == 1:
            return self._detokenize_batch(tf.RaggedTensor.from_tensor(ids[tf.newaxis]))[0]
        if ids.shape.rank != 2:
            raise ValueError(f"detokenize: expected 1-D or 2-D ids, got shape {ids.shape}.")
        return self._detokenize_batch(tf.RaggedTensor.from_tensor(ids))

    def _detokenize_batch(self, ids: tf.RaggedTensor) -> tf.Tensor:
        dense = ids.to_tensor(default_value=PAD_ID)
        before_eos = tf.cumsum(tf.cast(tf.equal(dense, EOS_ID), tf.int32), axis=1) == 0
        keep = before_eos & tf.not_equal(dense, PAD_ID) & tf.not_equal(dense, BOS_ID)
        kept = tf.ragged.boolean_mask(ids, tf.RaggedTensor.from_tensor(keep, lengths=ids.row_lengths()))
        if self.kind == "sentencepiece":
            return self._tokenizer.detokenize(kept)
        words = self._tokenizer.detokenize(tf.cast(kept, tf.int64))
        return tf.strings.reduce_join(words, axis=-1, separator=" ")

    def tokens(self) -> List[str]:
        """The vocabulary: token i is the text of id i."""
        if self.kind == "wordpiece":
            return list(self._options["vocab"])
        import sentencepiece

        processor = sentencepiece.SentencePieceProcessor(model_proto=self._options["model"])
        return [processor.id_to_piece(i) for i in range(self.vocab_size)]


def check_special_ids(config) -> None:
    """A `ConfigError` unless a `TransformerConfig` uses the ids this package's tokenizers reserve.

    The one place the two sources of BOS/EOS ids meet: the tokenizers, the data pipeline and detokenization use
    `BOS_ID` and `EOS_ID` (1, 2); the decoders and the export read `config.bos_id` and `config.eos_id`. A model
    trained or loaded with this package's vocabulary must have both agree.
    """
    wrong = [
        f"{name}={getattr(config, name)}"
        for name, reserved in (("pad_id", PAD_ID), ("bos_id", BOS_ID), ("eos_id", EOS_ID))
        if getattr(config, name) != reserved
    ]
    if wrong:
        raise ConfigError(
            f"{', '.join(wrong)}: this package's tokenizers reserve pad 0, BOS 1 and EOS 2, which training data and "
            "detokenization use while decoding reads the config. Fix: leave pad_id, bos_id and eos_id at 0, 1, 2."
        )
