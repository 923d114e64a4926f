"""Which decoder layer's cross-attention aligns words best: a quality check of `tf_transformer.decoding.alignment`.

Gold links, written by hand, for 20 English-German pairs of Multi30k's test_2016_flickr (the references, not a
model's output): for each German word that has an English counterpart, the English words it may be linked to
(a compound takes the words it joins, "saftig-grünes" -> "lush green"; a sentence's last word also takes the
source word that holds the final full stop, which both sides glue to their last word). German words with no
counterpart ("der" of a relative clause, an added article) are not scored: one link per target word is the
method's rule, so those links would be wrong whatever the layer. 179 German words are scored.

For each decoder layer, the script aligns the 20 reference pairs with `align_ids` (teacher-forced, rows predicting
each target piece) and `word_alignment`, and prints, as JSON, the share of scored words linked to a gold source
word: for the heads' average (what `tft-translate --with_alignments` uses, from the penultimate layer) and for
each head alone; also "shifted", the rows one position later (the attention while the target word is the decoder's
input, Chen et al. 2020's shift-att), for comparison.

    python benchmarks/alignment_layers.py --model_dir=runs/multi30k --average_last=5
"""

import argparse
import gzip
import json
import pathlib

import numpy as np

import tf_transformer  # noqa: F401  (before TensorFlow: see tf_transformer/__init__.py)
from tf_transformer.checkpoints import load_translation_model
from tf_transformer.decoding.alignment import align_ids, source_word_maps, target_word_maps, word_alignment

# test_2016_flickr line (0-based) -> {German word j: English words it may be linked to}.
GOLD = {
    0: {0: {0}, 1: {1}, 2: {2}, 3: {3}, 4: {4}, 5: {5}, 7: {8}, 8: {6, 7, 8}},
    1: {0: {0}, 1: {1}, 2: {2}, 3: {3, 4}, 4: {5}, 5: {6, 7}, 6: {8}, 7: {9, 10, 11}, 8: {12}, 9: {13}, 10: {14}},
    2: {0: {0}, 1: {1}, 2: {2}, 4: {3, 4}, 5: {5}, 6: {6}, 7: {7}, 8: {8}, 9: {9}, 10: {10, 11}},
    3: {0: {0}, 1: {1}, 2: {2}, 3: {3, 4}, 4: {5}, 6: {6}, 7: {7}, 8: {8, 9}, 9: {10}, 10: {11}, 11: {12},
        12: {13, 14}, 13: {15}},
    4: {0: {0}, 1: {1, 2}, 2: {3}, 3: {4}, 4: {5, 6}, 5: {7}},
    6: {0: {0}, 1: {1}, 2: {2}, 3: {3}, 4: {4}, 5: {5, 6, 7}, 6: {8}, 7: {9}},
    8: {j: {j} for j in range(6)},
    9: {0: {0}, 1: {1}, 2: {2}, 3: {3}, 4: {4}, 5: {5, 6}, 6: {7}, 7: {8}, 8: {9}, 9: {10}, 10: {11}, 11: {12}},
    10: {**{j: {j} for j in range(11)}, 11: {10}},
    12: {0: {0}, 1: {1}, 3: {7}, 4: {8}, 5: {9}, 6: {3}, 7: {4}, 8: {5}, 9: {6}, 10: {2, 9}},
    13: {1: {1}, 2: {0}, 4: {4}, 5: {5}, 6: {6}, 7: {7}, 8: {8}, 9: {9}, 10: {2}, 12: {3}, 13: {2, 9}},
    14: {j: {j} for j in range(6)},
    15: {0: {0}, 1: {1}, 2: {2}, 3: {3}, 4: {4, 5}, 5: {6, 7}, 6: {8}, 7: {9}, 8: {10}, 9: {11, 12}},
    16: {0: {0}, 1: {1}, 2: {2}, 3: {4}, 4: {5}, 5: {6}, 6: {7, 8}, 7: {9}, 8: {3, 9}},
    18: {0: {0}, 1: {1}, 2: {2, 3}, 3: {4}, 4: {5}, 5: {6, 8}, 8: {7, 8}},
    20: {0: {0}, 2: {2, 3}, 3: {4}, 4: {5}, 5: {1, 5}},
    22: {0: {0}, 1: {1}, 2: {2}, 3: {3}, 4: {4}, 5: {5}, 6: {6}, 7: {7}, 8: {8, 9}, 9: {10}},
    23: {0: {0}, 1: {1}, 2: {2, 3}, 3: {4}, 4: {5, 6, 7}, 5: {8, 9}, 6: {10}, 7: {11}, 8: {12}},
    24: {0: {0}, 1: {1}, 2: {2}, 3: {3}, 4: {4}, 5: {5}, 6: {6}, 7: {7}, 8: {9}, 9: {8, 10}},
    26: {j: {j} for j in range(6)},
}  # fmt: skip


def read_lines(path):
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return handle.read().splitlines()


def padded(rows, eos_id):
    """int32 `[len(rows), longest + 1]`: each row + EOS, 0-padded."""
    ids = np.zeros((len(rows), max(map(len, rows)) + 1), np.int32)
    for number, row in enumerate(rows):
        ids[number, : len(row) + 1] = row + [eos_id]
    return ids


def accuracy(weights, source_maps, target_maps, lines, shift=0):
    """The share of gold-scored target words whose link is a gold one; `weights` `[pairs, target_len, source_len]`."""
    right = 0
    for row, line in enumerate(lines):
        rows = weights[row, shift:]
        # The EOS column and row are left out (-1), as TextTranslator leaves them out.
        links = dict(
            (j, i)
            for i, j in word_alignment(
                rows, np.append(source_maps[row], -1), np.append(target_maps[row], -1)[: len(rows)]
            )
        )
        right += sum(links.get(j) in acceptable for j, acceptable in GOLD[line].items())
    return right / sum(len(gold) for gold in GOLD.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--average_last", type=int, default=None)
    parser.add_argument("--data_dir", default="../shared/data/multi30k")
    args = parser.parse_args()
    model, tokenizer, config = load_translation_model(args.model_dir, args.checkpoint, average_last=args.average_last)
    data = pathlib.Path(args.data_dir)
    english, german = read_lines(data / "test_2016_flickr.en.gz"), read_lines(data / "test_2016_flickr.de.gz")
    lines = sorted(GOLD)
    sources, targets = [english[line] for line in lines], [german[line] for line in lines]
    source_ids, target_ids = tokenizer.tokenize(sources).to_list(), tokenizer.tokenize(targets).to_list()
    source_maps, target_maps = source_word_maps(tokenizer, sources), target_word_maps(tokenizer, target_ids)
    source_batch, target_batch = padded(source_ids, config.eos_id), padded(target_ids, config.eos_id)
    decoder_input = np.concatenate([np.full((len(lines), 1), config.bos_id, np.int32), target_batch[:, :-1]], axis=1)
    cross = model.attention_weights(source_batch, decoder_input)["decoder_cross"]
    layers = []
    for layer in range(config.num_decoder_layers):
        mean = align_ids(model, source_batch, target_batch, layer).numpy()
        heads = [np.where(target_batch[:, :, None] != 0, cross[layer][:, head].numpy(), 0.0) for head in
                 range(config.num_heads)]  # fmt: skip
        layers.append({
            "layer": layer,
            "mean_of_heads": round(accuracy(mean, source_maps, target_maps, lines), 3),
            "heads": [round(accuracy(weights, source_maps, target_maps, lines), 3) for weights in heads],
            "shifted_mean_of_heads": round(accuracy(mean, source_maps, target_maps, lines, shift=1), 3),
        })  # fmt: skip
    scored = sum(len(gold) for gold in GOLD.values())
    print(json.dumps({"model_dir": args.model_dir, "pairs": len(lines), "scored_words": scored, "layers": layers}))


if __name__ == "__main__":
    main()
