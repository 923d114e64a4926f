"""The layer and model tests pass under Keras' PyTorch backend (tests/backends/conftest.py)."""


def test_the_backend_free_tests_pass_under_torch(run_backend_free_tests):
    run_backend_free_tests("torch")
