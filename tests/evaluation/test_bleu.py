"""score_translations against sacrebleu called directly, on a few sentences."""

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


def test_mismatched_counts_are_refused_naming_both():
    with pytest.raises(ValueError, match="3 hypotheses but 4 references"):
        score_translations(HYPOTHESES[:3], REFERENCES)
    with pytest.raises(ValueError, match="no sentences"):
        score_translations([], [])
