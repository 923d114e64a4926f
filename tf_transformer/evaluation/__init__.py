"""Scoring translations: corpus BLEU and chrF through sacrebleu.

from tf_transformer.evaluation import score_translations

scores = score_translations(hypotheses, references)   # two lists of detokenized sentences, aligned
scores["bleu"], scores["bleu_signature"], scores["chrf"], scores["tok_lower_bleu"]
"""

from tf_transformer.evaluation.bleu import score_translations

__all__ = ["score_translations"]
