"""`tune_length_penalty`: the length penalty that scores best on a model directory's validation split, written
into its decoding.json (what `tft-evaluate --tune_on=val` runs)."""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
from typing import Optional, Sequence, Union

from tf_transformer.checkpoints import load_translation_model
from tf_transformer.data.config import DataConfig
from tf_transformer.data.sources import open_corpus
from tf_transformer.decoding.settings import (
    DEFAULTS,
    PAPER,
    TUNED_LENGTH_PENALTIES,
    DecodingSettings,
    read_decoding_json,
    recorded_settings,
    require_settings,
    write_decoding_json,
)
from tf_transformer.decoding.text import translate_texts
from tf_transformer.evaluation import score_translations
from tf_transformer.model_dir import DATA_CONFIG_FILE, DECODING_FILE

logger = logging.getLogger("tf_transformer")

PathLike = Union[str, os.PathLike]


def tune_length_penalty(
    model_dir: PathLike,
    length_penalties: Sequence[float] = TUNED_LENGTH_PENALTIES,
    settings: DecodingSettings = PAPER,
    *,
    checkpoint: Optional[PathLike] = None,
    batch_tokens: int = 4096,
) -> dict:
    """Translates the validation split of `model_dir` (its data_config.json's) once per length penalty with beam
    search, keeps the one with the best BLEU (lowercased when the model's vocabulary lowercases; ties: the first in
    `length_penalties`) and writes it into MODEL_DIR/decoding.json, the other settings kept (from the file, else
    those the run was given). The other decoding settings are `settings`' (a beam search `DecodingSettings`;
    tft-evaluate passes decoding.json's); its average_last, or `checkpoint`, chooses the weights.

    Example:

        tune_length_penalty("runs/multi30k", (1.0, 1.5, 2.0), COMMAND_DEFAULTS)["length_penalty"]  # e.g. 1.5

    Returns:
        {"length_penalty", "bleu_by_length_penalty", "sentences", "decoding_json"}.

    Raises:
        FileNotFoundError: model_dir or its data_config.json is missing.
        ValueError: no length penalty, a bad one, or a problem of the checkpoint or the data
            (DataError, CheckpointError, ConfigError are ValueErrors).
    """
    model_dir = pathlib.Path(model_dir)
    if not length_penalties:
        raise ValueError("length_penalties: none given. Fix: pass a few, e.g. 1.0,1.5,2.0.")
    require_settings(settings)
    tried = [dataclasses.replace(settings, method="beam", length_penalty=value) for value in length_penalties]
    data_file = model_dir / DATA_CONFIG_FILE
    if not data_file.is_file():
        raise FileNotFoundError(f"{data_file}: missing. Fix: pass a --model_dir written by tft-train.")
    data_config = DataConfig.from_json(data_file)
    pairs = list(open_corpus(data_config, "valid").pairs())
    sources, references = [source for source, _ in pairs], [target for _, target in pairs]
    model, tokenizer, _ = load_translation_model(model_dir, checkpoint, average_last=settings.average_last)
    bleu = {}
    for value, each in zip(length_penalties, tried, strict=True):
        results = translate_texts(model, tokenizer, sources, each, batch_tokens=batch_tokens)
        best_hypotheses = [hypotheses[0][0] for hypotheses in results]
        # A lowercasing model is ranked on lowercased text: its cased BLEU counts every reference capital as an error.
        bleu[value] = score_translations(best_hypotheses, references, lowercase=data_config.lowercase)["bleu"]
        logger.info("Length penalty %g: BLEU %.2f on %d validation sentences", value, bleu[value], len(sources))
    best = max(bleu, key=lambda value: bleu[value])  # the first of equal ones
    settings = read_decoding_json(model_dir)
    if settings is None:  # a run from before decoding.json: start from what it was given
        settings = recorded_settings(model_dir) or DEFAULTS
    settings = {**settings, "length_penalty": best}
    write_decoding_json(model_dir, settings)
    return {
        "length_penalty": best,
        "bleu_by_length_penalty": {str(value): score for value, score in bleu.items()},
        "sentences": len(sources),
        "decoding_json": str(model_dir / DECODING_FILE),
    }
