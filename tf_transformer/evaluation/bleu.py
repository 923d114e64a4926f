"""Corpus BLEU and chrF of detokenized translations, through sacrebleu (Post, 2018).

Three figures, each reproducible from its sacrebleu signature:

- `bleu`: sacrebleu's standard corpus BLEU: detokenized, cased text, the default "13a" tokenizer (that of
  mteval-v13a.pl: punctuation split from words), exponential smoothing, one reference. Comparable across
  papers that quote a sacrebleu signature.
- `chrf`: chrF (character 6-grams, beta 2) with sacrebleu's defaults.
- `tok_lower_bleu`: "tokenized lowercased BLEU", the kind of figure much of the Multi30k literature reports:
  the same corpus BLEU computed on lowercased text tokenized with 13a, i.e. exactly
  `sacrebleu.metrics.BLEU(lowercase=True, tokenize="13a")`. Papers usually got theirs from Moses-tokenized
  text and `multi-bleu.perl -lc`; 13a splits punctuation much as the Moses tokenizer does for English,
  German and French, so the two are close but not identical (Moses also escapes some characters and
  splits some hyphens and apostrophes differently). Quote it with its signature.

Reference: Post, 2018, "A Call for Clarity in Reporting BLEU Scores", https://arxiv.org/abs/1804.08771
"""

from __future__ import annotations

from typing import Sequence

from sacrebleu.metrics import BLEU, CHRF


def score_translations(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Scores detokenized hypotheses against one reference each (corpus level; see the module docstring).

    Args:
        hypotheses: the system's translations, one str per sentence.
        references: the reference translations, aligned with `hypotheses`.

    Returns:
        A JSON-ready dict: "bleu", "bleu_signature", "chrf", "chrf_signature", "tok_lower_bleu",
        "tok_lower_bleu_signature" (scores in [0, 100]), "sentences" (the number of pairs),
        "hypothesis_tokens" and "reference_tokens" (13a tokens, cased: BLEU's hypothesis and reference
        lengths), "brevity_penalty" and "precisions" (the 1- to 4-gram precisions in percent) of "bleu".

    Raises:
        ValueError: the numbers of hypotheses and references differ (both are named), no sentences, or an
            item that is not a str.
    """
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: they must be aligned, one line each. "
            "Fix: check that the hypotheses translate exactly the source file of these references (and that no "
            "line was lost or added)."
        )
    if not hypotheses:
        raise ValueError("no sentences to score. Fix: pass at least one hypothesis and its reference.")
    for name, lines in (("hypotheses", hypotheses), ("references", references)):
        for index, line in enumerate(lines):
            if not isinstance(line, str):
                raise ValueError(f"{name}[{index}]: expected a str, got {type(line).__name__}.")
    bleu = BLEU()
    chrf = CHRF()
    tok_lower = BLEU(lowercase=True, tokenize="13a")
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    tok_lower_score = tok_lower.corpus_score(hypotheses, [references])
    return {
        "bleu": float(bleu_score.score),
        "bleu_signature": str(bleu.get_signature()),
        "chrf": float(chrf_score.score),
        "chrf_signature": str(chrf.get_signature()),
        "tok_lower_bleu": float(tok_lower_score.score),
        "tok_lower_bleu_signature": str(tok_lower.get_signature()),
        "sentences": len(hypotheses),
        "hypothesis_tokens": int(bleu_score.sys_len),
        "reference_tokens": int(bleu_score.ref_len),
        "brevity_penalty": float(bleu_score.bp),
        "precisions": [float(p) for p in bleu_score.precisions],
    }
