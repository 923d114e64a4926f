"""--mixed_precision of the commands that load a model to decode or score with it (tft-translate, tft-evaluate,
tft-score, tft-plot-attention, tft-export): one definition, one resolution, the same values as tft-train's.

"auto" decides as training does (`tf_transformer.training.precision.resolve_precision`): mixed_bfloat16 where the
hardware computes bf16 natively (a CPU with AVX-512 BF16 or AMX, a GPU of compute capability 8.0+), float32
elsewhere. Under mixed_bfloat16 the weights stay float32 variables and the layers compute in bf16; the logits
come out float32 (`Transformer.project`), so the decoders' log-softmax, top-k and scores are float32 either way.
int8 weights (--quantize=int8) are dequantized to float32, so with them auto is float32 and bf16 is refused.
The flag's values are checked before TensorFlow starts (absl, `check_flag_value`); `apply` runs after.
"""

import logging

from absl import flags

from tf_transformer.training.train_config import PRECISIONS  # no TensorFlow

AUTO = "auto"
FLOAT32 = "float32"
# What the commands that load a model log of their path (decoding/xla_batches.py has the XLA path for services).
COMMAND_PATH = (
    "graph mode, not XLA (XLA compiles each new batch shape for seconds and decodes a file's large batches no "
    "faster: benchmarks/NOTES.md entry 32; TensorFlow Serving runs no XLA by default: docs/serving.md)"
)

MIXED_PRECISION = flags.DEFINE_enum(
    "mixed_precision", AUTO, PRECISIONS,
    "Keras dtype policy the model computes in (its weights stay float32); auto: mixed_bfloat16 where the hardware "
    "computes bf16 natively (CPU with AVX-512 BF16 or AMX, GPU compute capability 8.0+), else float32.",
)  # fmt: skip


def check_flag_value(quantize: str) -> None:
    """A ValueError for a bf16 or float16 precision asked for with int8 weights (`quantize`, --quantize's value)."""
    if quantize != "none" and MIXED_PRECISION.value not in (AUTO, FLOAT32):
        raise ValueError(
            f"--mixed_precision={MIXED_PRECISION.value} with --quantize={quantize}: int8 weights are dequantized to "
            "float32 and compute in it. Fix: leave out --mixed_precision (auto is float32 with --quantize=int8), or "
            "--quantize."
        )


def apply(quantize: str) -> str:
    """Resolves --mixed_precision (with --quantize's value `quantize`), logs the policy and why in one line (as
    tft-train does), and sets it as Keras' global dtype policy, under which `load_translation_model` builds the
    model; a second line says that the command runs in graph mode and why (`COMMAND_PATH`). Returns
    the policy."""
    import keras

    from tf_transformer.training.precision import resolve_precision

    check_flag_value(quantize)
    if MIXED_PRECISION.value == AUTO and quantize != "none":
        policy, reason = FLOAT32, f"auto: --quantize={quantize} weights compute in float32"
    else:
        policy, reason = resolve_precision(MIXED_PRECISION.value)
    logger = logging.getLogger("tf_transformer")
    logger.info("Precision: %s (%s)", policy, reason)
    logger.info("Path: %s", COMMAND_PATH)
    keras.config.set_dtype_policy(policy)
    return policy
