"""int8 inference: `quantize_model(model, "int8")` stores a trained Transformer's matrices as int8.

The scheme (weight-only, per output channel) and why it was chosen over Keras' `Model.quantize` and over int8
activations are in `Transformer.quantize` and benchmarks/NOTES.md, entry 24. Importing this module imports
no TensorFlow (the commands' flags use `MODES`).
"""

from __future__ import annotations

# "none" keeps the float32 weights. The layers check the same names (layers/_quantized.py, which may import
# nothing outside `layers`); tests/test_quantization.py holds the two equal.
MODES = ("none", "int8")


def check_mode(mode) -> str:
    """`mode` if it is one of MODES, else a ValueError naming them and the fix."""
    if mode not in MODES:
        raise ValueError(f"quantize: expected one of {', '.join(MODES)}, got {mode!r}. Fix: pass int8 or none.")
    return mode


def quantize_model(model, mode: str = "int8"):
    """Quantizes a built `Transformer`'s weights in place, for inference, and returns it (`"none"`: unchanged).

    int8: every matrix (attention and feed-forward kernels, the embeddings, an untied output projection) becomes
    int8 with a float32 scale per output channel (per token for the embeddings); biases, layer norms and
    activations stay float32. Quantize a model once, and not for training.

    Raises:
        ValueError: an unknown mode, a model quantized already, or (int8) one that computes in bf16 or float16:
            the int8 weights are dequantized to float32.

    Example:
        model, tokenizer, _ = tf_transformer.checkpoints.load_translation_model("runs/multi30k")
        tf_transformer.quantization.quantize_model(model, "int8")
        tf_transformer.decoding.text.translate_texts(model, tokenizer, ["A dog runs in the snow."])
    """
    if check_mode(mode) != "none":  # Keras' wrapper of `model.quantize` knows no "none"
        if model.compute_dtype != "float32":
            raise ValueError(
                f"quantize: {mode} weights compute in float32, but the model computes in {model.compute_dtype}. Fix: "
                "load it under the float32 dtype policy (keras.config.set_dtype_policy('float32'); the commands: "
                "--mixed_precision=float32, or leave it out)."
            )
        model.quantize(mode)
    return model
