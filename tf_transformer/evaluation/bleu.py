"""Corpus BLEU and chrF of detokenized translations, through sacrebleu (Post, 2018).

Three figures, and a fourth on request, each reproducible from its signature:

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
- `moses_lower_bleu` (only when the target `language` is given): the figure as the Multi30k papers computed it.
  Both sides go through the dataset's own `lc.norm.tok` preprocessing (its `scripts/task1-tokenize.sh`:
  `lowercase.perl | normalize-punctuation.perl -l L | tokenizer.perl -l L`, here sacremoses' ports of those
  scripts), then corpus BLEU on those tokens as they are (`multi-bleu.perl`'s count; sacrebleu with
  `tokenize="none"`). Its signature names both steps.

With `lowercase=True` (for a model trained on lowercased text, whose translations come out lowercased) `bleu`
and `chrf` are computed on lowercased text too (sacrebleu's `lowercase=True`; their signatures say `case:lc`):
against cased references a lowercasing model's cased BLEU counts every capital letter as an error (Multi30k
German: 8-9 BLEU where tokenized lowercased BLEU is 40).

Reference: Post, 2018, "A Call for Clarity in Reporting BLEU Scores", https://arxiv.org/abs/1804.08771
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import Sequence

from sacrebleu.metrics import BLEU, CHRF

_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}")


def check_language(language: str | None) -> None:
    """Raises ValueError unless `language` is None or a lowercase ISO 639 code (what `multi30k_tokenize` reads)."""
    if language is not None and not _LANGUAGE_CODE.fullmatch(language):
        raise ValueError(
            f"language {language!r}: expected the target language's ISO 639 code in lowercase. Fix: pass e.g. de, fr."
        )


def multi30k_tokenize(lines: Sequence[str], language: str) -> list[str]:
    """Multi30k's `lc.norm.tok` preprocessing of `lines` in `language`: lowercased, punctuation normalized and
    Moses-tokenized with its escapes (`&apos;`, `&quot;`, ...), tokens joined by single spaces; what the dataset's
    `data/task1/tok/*.lc.norm.tok.*` files hold, and what the published Multi30k systems trained on and were scored
    with. Moses' `-a` (split hyphens) is not used, as the dataset's script does not use it."""
    from sacremoses import MosesPunctNormalizer, MosesTokenizer  # only this figure needs it

    normalizer = MosesPunctNormalizer(lang=language)
    tokenizer = MosesTokenizer(lang=language)
    return [tokenizer.tokenize(normalizer.normalize(line.lower()), return_str=True, escape=True) for line in lines]


def _moses_lower_bleu(hypotheses: list[str], references: list[str], language: str) -> dict:
    bleu = BLEU(tokenize="none", force=True)  # force: the input is tokenized on purpose
    score = bleu.corpus_score(multi30k_tokenize(hypotheses, language), [multi30k_tokenize(references, language)])
    preprocessing = f"lc.norm.tok:{language}|sacremoses:{importlib.metadata.version('sacremoses')}"
    signature = f"{preprocessing}|{bleu.get_signature()}"
    return {"moses_lower_bleu": float(score.score), "moses_lower_bleu_signature": signature}


def score_translations(
    hypotheses: Sequence[str], references: Sequence[str], language: str | None = None, lowercase: bool = False
) -> dict:
    """Scores detokenized hypotheses against one reference each (corpus level; see the module docstring).

    Args:
        hypotheses: the system's translations, one str per sentence.
        references: the reference translations, aligned with `hypotheses`.
        language: the target language's code (e.g. "de"), for `moses_lower_bleu`; None leaves that figure out.
        lowercase: score "bleu" and "chrf" on lowercased text (a model that lowercases; see the module docstring).

    Returns:
        A JSON-ready dict: "bleu", "bleu_signature", "chrf", "chrf_signature", "tok_lower_bleu",
        "tok_lower_bleu_signature" (scores in [0, 100]), "sentences" (the number of pairs),
        "hypothesis_tokens" and "reference_tokens" (13a tokens: BLEU's hypothesis and reference lengths),
        "brevity_penalty" and "precisions" (the 1- to 4-gram precisions in percent) of "bleu", and "lowercase"
        (the argument); with `language` also "moses_lower_bleu" and "moses_lower_bleu_signature".

    Raises:
        ValueError: the numbers of hypotheses and references differ (both are named), no sentences, an item that
            is not a str, or a `language` that is not a lowercase ISO 639 code.

    Example:

    >>> scores = score_translations(["Ein Hund läuft im Schnee."], ["Ein Hund läuft im Schnee."])
    >>> round(scores["bleu"], 1), scores["sentences"]
    (100.0, 1)
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
    check_language(language)
    bleu = BLEU(lowercase=lowercase)
    chrf = CHRF(lowercase=lowercase)
    tok_lower = BLEU(lowercase=True, tokenize="13a")
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    tok_lower_score = tok_lower.corpus_score(hypotheses, [references])
    scores = {
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
        "lowercase": bool(lowercase),
    }
    if language is not None:
        scores.update(_moses_lower_bleu(hypotheses, references, language))
    return scores
