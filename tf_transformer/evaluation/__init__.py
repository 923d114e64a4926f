"""Scoring translations: corpus BLEU and chrF through sacrebleu (and sacremoses for Moses-tokenized BLEU).

from tf_transformer.evaluation import score_translations

scores = score_translations(hypotheses, references)   # two lists of detokenized sentences, aligned
scores["bleu"], scores["bleu_signature"], scores["chrf"], scores["tok_lower_bleu"]
score_translations(hypotheses, references, language="de")["moses_lower_bleu"]   # as Multi30k papers score
"""

from tf_transformer._lazy import lazy_attributes

# Imported on first use (PEP 562; see tf_transformer/_lazy.py): public name -> its module.
_LAZY = {
    "score_translations": "tf_transformer.evaluation.bleu",
}
__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)

__all__ = ["score_translations"]
