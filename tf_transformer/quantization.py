"""int8 inference: `quantize_model(model, "int8")` stores a trained Transformer's matrices as int8.

The scheme (weight-only, per output channel) and why it was chosen over Keras' `Model.quantize` and over int8
activations are in `Transformer.quantize` and benchmarks/NOTES.md, entry 24. Importing this module imports
no TensorFlow (the commands' flags use `MODES`).

    model, tokenizer, _ = tf_transformer.checkpoints.load_translation_model("runs/multi30k")
    tf_transformer.quantization.quantize_model(model, "int8")
    tf_transformer.decoding.text.translate_texts(model, tokenizer, ["A dog runs in the snow."])
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
    """Quantizes a built `Transformer`'s weights in place for inference and returns it; `mode="none"` leaves
    it as it is.

    int8: every matrix (attention and feed-forward kernels, the embeddings, an untied output projection) is
    stored as int8 with one float32 scale per output channel (per token for the embeddings), Keras' abs-max
    scheme (scale = 127 / max |w|). Biases, layer norms and activations stay float32; the decoders
    dequantize the decoder's kernels once per call. A model is quantized once; it is not for training.

    Raises:
        ValueError: an unknown mode, or a model quantized already.
    """
    if check_mode(mode) != "none":  # Keras' wrapper of `model.quantize` knows no "none"
        model.quantize(mode)
    return model
