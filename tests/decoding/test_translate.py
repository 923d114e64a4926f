"""The public entry point `translate`, and the docstring contracts of the decoding package."""

import doctest
import inspect

import numpy as np
import pytest

import tf_transformer.decoding as decoding
from tf_transformer.decoding import (
    DecodeResult,
    DecodingSettings,
    beam_search,
    greedy_decode,
    sample_decode,
    translate,
    trim_padding,
)


def test_translate_dispatches_with_one_output_layout(helpers):
    rng = np.random.default_rng(31)
    model = helpers.TableModel(rng.normal(size=(8, 97, 12)), max_length=8)
    sources = helpers.make_sources([4, 2, 3], seed=31)

    result = translate(model, sources, DecodingSettings(beam_size=3, n_best=2))
    assert isinstance(result, DecodeResult)
    ids, scores = beam_search(model, sources, DecodingSettings(beam_size=3, n_best=2))
    np.testing.assert_array_equal(result.ids, ids)
    np.testing.assert_array_equal(result.scores, scores)

    greedy_ids, greedy_scores = greedy_decode(model, sources)
    result = translate(model, sources, DecodingSettings(method="greedy"))
    assert result.ids.shape == (3, 1, greedy_ids.shape[-1]) and result.scores.shape == (3, 1)
    np.testing.assert_array_equal(result.ids[:, 0], greedy_ids)
    np.testing.assert_array_equal(result.scores[:, 0], greedy_scores)

    # beam_size=1 is greedy search; with alpha = 0 the scores are the greedy log-probability sums too.
    result = translate(model, sources, DecodingSettings(beam_size=1, length_penalty=0.0))
    np.testing.assert_array_equal(result.ids[:, 0], greedy_ids)
    np.testing.assert_allclose(result.scores[:, 0], greedy_scores, rtol=1e-6)

    result = translate(model, sources, DecodingSettings(method="sample", top_k=5, seed=3))
    np.testing.assert_array_equal(
        result.ids[:, 0], sample_decode(model, sources, DecodingSettings(method="sample", top_k=5, seed=3))[0]
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(method="nucleus"), "method"),
        (dict(method="greedy", top_k=5), "top_k"),
        (dict(top_p=0.9), "top_p"),
        (dict(method="greedy", n_best=2), "n_best"),
        (dict(beam_size=2, n_best=3), "n_best"),
    ],
)
def test_translate_refuses_unclear_requests(helpers, kwargs, match):
    model = helpers.TableModel(np.zeros((4, 6)), max_length=4)
    with pytest.raises(ValueError, match=match):
        translate(model, np.array([[5, 2]]), DecodingSettings(**kwargs))


def test_trim_padding_drops_only_all_zero_columns():
    ids = np.array([[4, 2, 0, 0, 0], [5, 6, 2, 0, 0]])
    np.testing.assert_array_equal(trim_padding(ids), ids[:, :3])
    assert trim_padding(np.zeros((2, 4), int)).shape == (2, 0)


@pytest.mark.parametrize("function", [greedy_decode, beam_search, sample_decode, translate])
def test_docstring_is_the_contract_and_its_example_runs(function):
    docstring = inspect.getdoc(function)
    for section in ("Args:", "Returns:", "Example:", "Vaswani et al."):
        assert section in docstring, f"{function.__name__}: no {section}"
    for name in inspect.signature(function).parameters:
        if name != "sampling_kwargs":
            assert f"{name}" in docstring, f"{function.__name__}: argument {name} is not documented"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(function, globs=vars(decoding).copy()):
        runner.run(test)
    results = runner.summarize(verbose=False)
    # An "Example:" section that doctest cannot see (no ">>>" prompts) would run nothing and pass.
    assert results.attempted > 0, f"{function.__name__}: its docstring has no doctest example"
    assert results.failed == 0
