"""The layer and model tests of conftest.IN_CI pass under Keras' JAX backend, and a model trained under it serves
from TensorFlow (tests/backends/conftest.py)."""


def test_the_backend_free_tests_pass_under_jax(run_backend_free_tests):
    run_backend_free_tests("jax")


def test_a_model_trained_under_jax_translates_and_exports_under_tensorflow(train_anywhere):
    summary = train_anywhere("jax")
    # The example has checked the logits (within 1e-4) and that the SavedModel translates as tft.decoding does.
    assert (summary["trained_under"], summary["served_under"]) == ("jax", "tensorflow")
    assert summary["logits_difference"] <= 1e-4
    assert summary["held_out_copied"] >= 0.9, summary  # copies of 50 sentences it never saw
