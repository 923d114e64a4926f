"""The model directory's layout: the name of every file and folder that `tft-train` writes and the commands read.

One module, importing nothing, so that the trainer that writes a model directory, the readers
(`tf_transformer.checkpoints`), validation BLEU and the exporter name its parts the same way without importing
each other. docs/DESIGN.md ("The model directory") says what each holds.
"""

CONFIG_FILE = "config.json"  # the resolved TransformerConfig
DATA_CONFIG_FILE = "data_config.json"
TRAIN_CONFIG_FILE = "train_config.json"
DATA_REPORT_FILE = "data_report.json"
VOCAB_DIR = "vocab"
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
DECODING_FILE = "decoding.json"  # beam_size, length_penalty, method, average_last: tft-translate's defaults
