"""The layer and model tests pass under Keras' JAX backend (tests/backends/conftest.py)."""


def test_the_backend_free_tests_pass_under_jax(run_backend_free_tests):
    run_backend_free_tests("jax")
