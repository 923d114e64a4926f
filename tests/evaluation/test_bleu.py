"""score_translations against sacrebleu called directly, on a few sentences."""

import importlib.metadata
import math
from collections import Counter

import pytest
import sacrebleu

from tf_transformer.evaluation import score_translations

REFERENCES = [
    "Ein Mann fährt mit dem Fahrrad.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau liest ein Buch im Park.",
    "Kinder spielen Fußball auf der Straße.",
]
HYPOTHESES = [
    "ein Mann fährt Fahrrad .",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau liest im Park ein Buch.",
    "Die Kinder spielen auf einer Straße Fußball!",
]


def test_the_scores_are_sacrebleus():
    scores = score_translations(HYPOTHESES, REFERENCES)
    bleu = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES])
    chrf = sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES])
    lowercase = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], lowercase=True, tokenize="13a")
    assert scores["bleu"] == pytest.approx(bleu.score)
    assert scores["chrf"] == pytest.approx(chrf.score)
    assert scores["tok_lower_bleu"] == pytest.approx(lowercase.score)
    assert scores["tok_lower_bleu"] > scores["bleu"] > 0  # "ein Mann" matches only when lowercased
    assert scores["sentences"] == 4
    assert scores["hypothesis_tokens"] == bleu.sys_len and scores["reference_tokens"] == bleu.ref_len
    assert scores["brevity_penalty"] == pytest.approx(bleu.bp)
    assert scores["precisions"] == pytest.approx(bleu.precisions)
    version = sacrebleu.__version__
    assert scores["bleu_signature"] == f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{version}"
    assert scores["tok_lower_bleu_signature"] == f"nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:{version}"
    assert scores["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|")


def test_identical_hypotheses_score_100():
    scores = score_translations(REFERENCES, REFERENCES)
    assert scores["bleu"] == pytest.approx(100.0)
    assert scores["chrf"] == pytest.approx(100.0)
    assert scores["tok_lower_bleu"] == pytest.approx(100.0)


def test_lowercase_scores_bleu_and_chrf_on_lowercased_text():
    # A lowercasing model's output against cased references: cased BLEU counts each capital as an error.
    lowercased = [hypothesis.lower() for hypothesis in HYPOTHESES]
    scores = score_translations(lowercased, REFERENCES, lowercase=True)
    folded = [reference.lower() for reference in REFERENCES]
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(lowercased, [folded]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(lowercased, [folded]).score)
    assert scores["bleu"] == pytest.approx(scores["tok_lower_bleu"])
    assert scores["bleu"] > score_translations(lowercased, REFERENCES)["bleu"] + 10
    assert scores["lowercase"] is True and score_translations(HYPOTHESES, REFERENCES)["lowercase"] is False
    assert "|case:lc|" in scores["bleu_signature"] and "|case:lc|" in scores["chrf_signature"]


def test_mismatched_counts_are_refused_naming_both():
    with pytest.raises(ValueError, match="3 hypotheses but 4 references"):
        score_translations(HYPOTHESES[:3], REFERENCES)
    with pytest.raises(ValueError, match="no sentences"):
        score_translations([], [])


def ngram_counts(tokens, n):
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def corpus_bleu_on_tokens(hypotheses, references):
    """Papineni et al.'s corpus BLEU (4-grams, uniform weights, brevity penalty) on space-separated tokens, as
    `multi-bleu.perl` counts it: the independent reference for moses_lower_bleu."""
    matches, totals = [0] * 4, [0] * 4
    hypothesis_length = reference_length = 0
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        hypothesis_tokens, reference_tokens = hypothesis.split(), reference.split()
        hypothesis_length += len(hypothesis_tokens)
        reference_length += len(reference_tokens)
        for n in range(1, 5):
            hypothesis_ngrams = ngram_counts(hypothesis_tokens, n)
            matches[n - 1] += sum((hypothesis_ngrams & ngram_counts(reference_tokens, n)).values())
            totals[n - 1] += max(len(hypothesis_tokens) - n + 1, 0)
    log_precision = sum(math.log(match / total) for match, total in zip(matches, totals, strict=True)) / 4
    brevity_penalty = min(1.0, math.exp(1 - reference_length / hypothesis_length))
    return 100 * brevity_penalty * math.exp(log_precision)


# Raw captions, and what Multi30k's data/task1/tok/*.lc.norm.tok.de files hold for such lines (lowercased, quotes
# normalized, Moses tokens with their escapes; hyphenated words kept whole: the dataset's script passes no -a).
RAW_GERMAN = ['Ein Mann mit einem "roten" T-Shirt.', "Zwei Hunde spielen im Park's Schnee.", "Ein Kind isst 1,5 Äpfel."]
MULTI30K_TOKENS = [
    "ein mann mit einem &quot; roten &quot; t-shirt .",
    "zwei hunde spielen im park &apos; s schnee .",
    "ein kind isst 1,5 äpfel .",
]


def test_multi30k_tokenize_gives_the_datasets_tokens():
    from tf_transformer.evaluation.bleu import multi30k_tokenize

    assert multi30k_tokenize(RAW_GERMAN, "de") == MULTI30K_TOKENS


def test_moses_lower_bleu_is_bleu_on_the_datasets_tokens():
    hypotheses = ['Ein Mann in einem "roten" T-Shirt.', "Zwei Hunde spielen im Park's Schnee!", "Ein Kind isst Äpfel."]
    hypothesis_tokens = [
        "ein mann in einem &quot; roten &quot; t-shirt .",
        "zwei hunde spielen im park &apos; s schnee !",
        "ein kind isst äpfel .",
    ]
    scores = score_translations(hypotheses, RAW_GERMAN, language="de")
    assert scores["moses_lower_bleu"] == pytest.approx(corpus_bleu_on_tokens(hypothesis_tokens, MULTI30K_TOKENS))
    # 13a keeps "park's" one token and splits the escapes' characters otherwise: a different figure.
    assert abs(scores["moses_lower_bleu"] - scores["tok_lower_bleu"]) > 1
    version = sacrebleu.__version__
    assert scores["moses_lower_bleu_signature"] == (
        f"lc.norm.tok:de|sacremoses:{importlib.metadata.version('sacremoses')}"
        f"|nrefs:1|case:mixed|eff:no|tok:none|smooth:exp|version:{version}"
    )
    assert score_translations(RAW_GERMAN, RAW_GERMAN, language="de")["moses_lower_bleu"] == pytest.approx(100.0)


def test_moses_lower_bleu_only_with_a_language_code():
    assert "moses_lower_bleu" not in score_translations(HYPOTHESES, REFERENCES)
    for language in ("German", "DE", ""):
        with pytest.raises(ValueError, match="ISO 639 code in lowercase. Fix: pass e.g. de"):
            score_translations(HYPOTHESES, REFERENCES, language=language)
