"""`export_saved_model`: a trained model directory -> one version of a TensorFlow Serving model."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import tempfile
import uuid
from typing import List, Optional, Union

import tensorflow as tf

from tf_transformer.checkpoints import load_translation_model, resolve_checkpoint
from tf_transformer.decoding.settings import PAPER, DecodingSettings, is_int, require_settings
from tf_transformer.export.module import TranslationModule
from tf_transformer.export.warmup import write_warmup_requests
from tf_transformer.model_dir import CHECKPOINT_DIR, CONFIG_FILE, DATA_CONFIG_FILE, VOCAB_DIR
from tf_transformer.quantization import check_mode, quantize_model

logger = logging.getLogger("tf_transformer")

PathLike = Union[str, os.PathLike]

# Inside an export (a version folder): the files beside TensorFlow's own.
EXPORT_CONFIG_FILE = "export_config.json"
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
# What export_config.json says of each signature.
SIGNATURES = {
    "serving_default": "inputs: string [batch] -> outputs: string [batch], scores: float32 [batch]",
    "translate_nbest": "inputs: string [batch] -> outputs: string [batch, n_best], scores: float32 [batch, n_best]",
    "translate_with_prefix": "inputs: string [batch], target_prefixes: string [batch] -> outputs: string [batch], "
    "scores: float32 [batch]",
    "translate_ids": "source_ids: int32 [batch, source_len] -> output_ids: int32 [batch, T], scores: float32 [batch]",
}
# Sentences for the warmup requests when the model directory names no local validation file.
FALLBACK_WARMUP_SENTENCES = (
    "A man in a blue shirt is standing on a ladder.",
    "Two dogs are playing in the snow.",
    "A little girl is climbing the stairs to her wooden playhouse.",
)


def export_saved_model(
    model_dir: PathLike,
    export_dir: PathLike,
    settings: DecodingSettings = PAPER,
    *,
    version: Optional[int] = None,
    checkpoint: Optional[PathLike] = None,
    quantize: str = "none",
) -> pathlib.Path:
    """Exports a trained model directory as `export_dir/<version>/`, a SavedModel for TensorFlow Serving.

    The SavedModel holds a `TranslationModule` (see there for its signatures and its input behaviour):
    strings in, translations out, tokenizer and beam search in the graph. Beside TensorFlow's files the
    version folder holds:

    - `assets/config.json`: the resolved `TransformerConfig`; `assets/export_config.json`: the decoding
      settings, the checkpoint, the precision (Keras' global dtype policy, which the model is loaded under), the
      signatures and the TensorFlow / tensorflow-text versions it was exported with; `assets/` also has the
      vocabulary files (e.g. `spm.model`), for `translate_ids` users.
    - `assets.extra/tf_serving_warmup_requests`: `PredictionLog` records that TensorFlow Serving replays
      when it loads the model, so the first real request does not pay for the first run of the graph
      (sentences from the model directory's validation source file when it is local, else fixed ones).

    The export is written to a hidden folder beside the version folder and renamed into place at the end,
    so TensorFlow Serving (which watches `export_dir` for numbered folders) never sees half an export, and
    a failure leaves nothing behind.

    Args:
        model_dir: a folder written by `tft-train`.
        export_dir: the model's base folder (the one TensorFlow Serving's `--model_base_path` names).
        version: the version number; None for one more than the highest version in `export_dir` (1 first).
        settings: a `DecodingSettings`, as `TranslationModule` takes it (fixed in the export, recorded in
            export_config.json); its average_last, instead of `checkpoint`, exports the average of the last N
            checkpoints (computed in memory).
        checkpoint: as in `load_translation_model`: None for the latest; a path prefix or a folder.
        quantize: "int8" to store the matrices as int8 (`tf_transformer.quantization.quantize_model`; TensorFlow
            core ops only, so TensorFlow Serving runs it), "none" for float32.

    Returns:
        The version folder, `export_dir/<version>`.

    Raises:
        FileExistsError: `export_dir/<version>` exists already (an export is never overwritten).
        FileNotFoundError: model_dir, its config, vocabulary or checkpoint is missing.
        ValueError: a bad version, or an `export_dir` that is itself a SavedModel.
        TypeError: `settings` is not a `DecodingSettings`.

    Example:

        export_saved_model("runs/multi30k", "exports/multi30k", DecodingSettings(beam_size=4, n_best=4))
    """
    require_settings(settings)
    export_dir = pathlib.Path(export_dir)
    if (export_dir / "saved_model.pb").is_file():
        raise ValueError(
            f"export_dir: {export_dir} is itself a SavedModel, but TensorFlow Serving wants one numbered folder per "
            f"version inside the base folder. Fix: pass its parent ({export_dir.parent}) or a new folder."
        )
    check_mode(quantize)
    version = next_version(export_dir) if version is None else version
    if not is_int(version) or version < 0:
        raise ValueError(f"version: must be an integer >= 0, got {version!r}. Fix: leave it out for the next one.")
    target = export_dir / str(version)
    _refuse_existing(target)
    model, tokenizer, config = load_translation_model(model_dir, checkpoint, average_last=settings.average_last)
    quantize_model(model, quantize)
    checkpoint_path = resolve_checkpoint(checkpoint, model_dir) if checkpoint is not None else None
    module = TranslationModule(model, tokenizer, settings)
    record = {
        **module.settings,
        "max_source_tokens": module.max_source_tokens,
        "version": version,
        "model_dir": str(pathlib.Path(model_dir).resolve()),
        "checkpoint": checkpoint_path or tf.train.latest_checkpoint(str(pathlib.Path(model_dir) / CHECKPOINT_DIR)),
        # with N, the weights are the average of the last N, the newest "checkpoint"
        "average_last": settings.average_last,
        "quantize": quantize,  # int8: the SavedModel's matrices are int8 (tf_transformer.quantization)
        "mixed_precision": model.dtype_policy.name,  # the graph's compute dtype is fixed in the SavedModel
        "signatures": SIGNATURES,
        "tensorflow_version": tf.__version__,
        "tensorflow_text_version": _tensorflow_text_version(),
    }
    export_dir.mkdir(parents=True, exist_ok=True)
    staging = export_dir / f".{version}.exporting-{uuid.uuid4().hex[:8]}"
    try:
        _save(module, config, record, model_dir, staging)
        write_warmup_requests(staging / WARMUP_FILE, warmup_sentences(model_dir), tokenizer, model_name=export_dir.name)
        _refuse_existing(target)  # another export may have taken the version meanwhile
        os.rename(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    logger.info("Exported %s", target)
    return target


def _save(module: TranslationModule, config, record: dict, model_dir: PathLike, staging: pathlib.Path) -> None:
    """`tf.saved_model.save` of `module` into `staging`, with config.json, export_config.json (`record`) and
    the vocabulary files as tracked assets (TensorFlow copies them into assets/, a loaded model knows their
    paths)."""
    with tempfile.TemporaryDirectory() as assets:
        assets = pathlib.Path(assets)
        config.to_json(assets / CONFIG_FILE)
        (assets / EXPORT_CONFIG_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        module.config_file = tf.saved_model.Asset(str(assets / CONFIG_FILE))
        module.export_config_file = tf.saved_model.Asset(str(assets / EXPORT_CONFIG_FILE))
        vocab_dir = pathlib.Path(model_dir) / VOCAB_DIR
        module.vocabulary_files = [
            tf.saved_model.Asset(str(path))
            for path in sorted(vocab_dir.iterdir())
            if path.is_file() and not path.name.startswith(".")  # not a leftover temporary file
        ]
        tf.saved_model.save(module, str(staging), signatures=module.signatures())


def next_version(export_dir: PathLike) -> int:
    """One more than the highest numbered folder in `export_dir`; 1 if there is none."""
    export_dir = pathlib.Path(export_dir)
    if not export_dir.is_dir():
        return 1
    versions = [int(path.name) for path in export_dir.iterdir() if path.is_dir() and path.name.isdigit()]
    return max(versions, default=0) + 1


def warmup_sentences(model_dir: PathLike, count: int = 3) -> List[str]:
    """The first `count` sentences of the model directory's validation source when it is a local file (the
    "files" dataset, or Multi30k with --data_dir), else `FALLBACK_WARMUP_SENTENCES`. Never downloads."""
    from tf_transformer.data import DataConfig, DataError
    from tf_transformer.data.sources import open_corpus

    path = pathlib.Path(model_dir) / DATA_CONFIG_FILE
    try:
        data_config = DataConfig.from_json(path)
        local = (data_config.dataset == "files" and data_config.valid_source) or (
            data_config.dataset == "multi30k" and data_config.data_dir
        )
        if local:
            sentences = []
            for source, _ in open_corpus(data_config, "valid").pairs():
                sentences.append(source)
                if len(sentences) == count:
                    return sentences
    except (DataError, OSError, ValueError):
        pass  # the validation data moved or was never there: the fixed sentences do as well
    return list(FALLBACK_WARMUP_SENTENCES[:count])


def _refuse_existing(target: pathlib.Path) -> None:
    if target.exists():
        raise FileExistsError(
            f"version: {target} exists already, and an export is never overwritten (TensorFlow Serving may be "
            f"serving it). Fix: leave --version out to write the next version ({next_version(target.parent)}), or "
            "pass an unused one."
        )


def _tensorflow_text_version() -> str:
    import tensorflow_text

    return tensorflow_text.__version__
