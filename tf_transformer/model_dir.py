"""The model directory's layout: the name of every file and folder that `tft-train` writes and the commands read.

One module, importing nothing of the package (and no TensorFlow), so that the trainer that writes a model directory,
the readers (`tf_transformer.checkpoints`), validation BLEU and the exporter name its parts the same way without
importing each other, and the commands can check a --model_dir before TensorFlow starts (`check_model_dir`).
docs/DESIGN.md ("The model directory") says what each holds.
"""

import os
import pathlib
from typing import Union

CONFIG_FILE = "config.json"  # the resolved TransformerConfig
DATA_CONFIG_FILE = "data_config.json"
TRAIN_CONFIG_FILE = "train_config.json"
DATA_REPORT_FILE = "data_report.json"
VOCAB_DIR = "vocab"
VOCAB_RECORD = "tokenizer.json"  # in VOCAB_DIR, the Tokenizer's record (data.tokenizer.TOKENIZER_JSON), written last
CHECKPOINT_DIR = "checkpoints"  # a tf.train.CheckpointManager folder of ckpt-<step>
UNREADABLE_DIR = "unreadable"  # in CHECKPOINT_DIR: the files of checkpoints training could not read, kept
AVERAGED_DIR = "averaged"
AVERAGED_JSON = "averaged_checkpoints.json"  # in AVERAGED_DIR
BEST_DIR = "best"
BEST_JSON = "best.json"  # in BEST_DIR
BEST_CHECKPOINT = "best"  # the `checkpoint=` name of the best checkpoint by validation BLEU
LOG_DIR = "logs"  # Keras' TensorBoard callback: logs/train, logs/validation
TRAIN_LOG_DIR = "logs/train"  # also the trainer's own per-step scalars (TrainingMonitor, the multi-worker loop)
BLEU_LOG_DIR = "logs/bleu"  # not logs/validation, which Keras' TensorBoard callback writes to
DECODING_FILE = "decoding.json"  # the commands' decoding defaults (keys: decoding.settings.JSON_SETTINGS)
DECODING_RECORD = "decoding"  # in TRAIN_CONFIG_FILE: the decoding settings the run was given (update_decoding_json)

# The fix every "not a model directory" error ends with.
MODEL_DIR_FIX = "Fix: pass the --model_dir that tft-train wrote."


def check_model_dir(model_dir: Union[str, os.PathLike]) -> pathlib.Path:
    """`model_dir` as a path if it is a folder with a config.json, as tft-train writes one; else FileNotFoundError
    that names what is missing and the fix. File checks only: the commands run it before TensorFlow starts, so a
    mistyped --model_dir is refused at once (`tf_transformer.checkpoints` reads and checks the rest)."""
    model_dir = pathlib.Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model_dir: {model_dir} is not a folder. {MODEL_DIR_FIX}")
    if not (model_dir / CONFIG_FILE).is_file():
        raise FileNotFoundError(
            f"model_dir: {model_dir / CONFIG_FILE} does not exist, so {model_dir} is not a trained model directory. "
            f"{MODEL_DIR_FIX}"
        )
    return model_dir
