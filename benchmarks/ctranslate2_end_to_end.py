"""tft-translate against CTranslate2 on real text: one trained model, converted, the same sentences, one sitting.

    python benchmarks/ctranslate2_end_to_end.py --model_dir=runs/multi30k --output_dir=runs/ct2_end_to_end \
        --sources=../shared/data/multi30k/test_2016_flickr.en.gz \
        --references=../shared/data/multi30k/test_2016_flickr.de.gz --lowercase

What it does, in order (prints one JSON object, also written to OUTPUT_DIR/summary.json):

1. Loads the model as `tft-translate --model_dir` does (the checkpoints decoding.json averages), converts it to a
   CTranslate2 model (`convert`: a `ctranslate2.specs.TransformerSpec` with the same weights, position table, layer
   norm epsilon and special ids) and writes the sentences' source ids, made by the model's own tokenizer.
2. Runs `tft-translate` on the sentences as a user runs it (its defaults: decoding.json's settings, the precision it
   chooses for this CPU), timed from the command's start to its exit.
3. Runs CTranslate2 (`--ct2_python`: a Python with `ctranslate2`, e.g. the peer harness's /tmp/peer-ct2) on the same
   source ids for each `--compute_types`, timed from that process's start (import and model load included) to its
   exit, and its decoding alone.
4. Detokenizes CTranslate2's ids with the model's tokenizer and scores every output against `--references` with
   `tft-evaluate`'s scorer.

The decoding is decoding.json's as far as CTranslate2 has it: the same beam size and no-repeat n-gram size; the
length cap "Ax+B" per sentence (CTranslate2 takes one `max_decoding_length` a call, so sentences of one cap are
translated in one call); CTranslate2's length penalty divides a hypothesis' log-probability by length**alpha,
where ours divides by ((5 + length) / 6)**alpha (GNMT's), with the same alpha: the one setting that differs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAME = "id{}"  # CTranslate2 takes tokens as strings: the id's, but for the special tokens' own names


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model_dir", required=True)
    parser.add_argument("--sources", required=True, help="one sentence a line (.gz read as gzip)")
    parser.add_argument("--references", required=True)
    parser.add_argument("--output_dir", default="runs/ct2_end_to_end")
    parser.add_argument("--lowercase", action="store_true", help="score on lowercased text (a --lowercase model)")
    parser.add_argument("--average_last", type=int, help="checkpoints to average (default: decoding.json's)")
    parser.add_argument("--ct2_python", default="/tmp/peer-ct2/bin/python")
    parser.add_argument("--compute_types", default="float32,int8")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    if len(sys.argv) == 2 and sys.argv[1].startswith("--ct2="):  # the CTranslate2 child: its work file
        translate_with_ctranslate2(pathlib.Path(sys.argv[1].partition("=")[2]))
        return
    args = parser.parse_args()
    output_dir = pathlib.Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    settings = convert(args.model_dir, read_lines(args.sources), output_dir, args.average_last)
    results = {"tft-translate": run_tft_translate(args, output_dir)}
    for compute_type in args.compute_types.split(","):
        results[f"ctranslate2 {compute_type}"] = run_ctranslate2(args, output_dir, compute_type)
    scored = score(args, output_dir, results)
    summary = {"model_dir": args.model_dir, "sentences": settings["sentences"], "decoding": settings["decoding"],
               "results": scored}  # fmt: skip
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


def convert(model_dir, sentences, output_dir: pathlib.Path, average_last=None) -> dict:
    """Writes output_dir/ct2_model (the converted model), work.json (source ids, length caps, decoding) and returns
    the work's summary. The CTranslate2 side is built in the child process, which alone imports ctranslate2: the
    weights travel as ct2_weights.npz under CTranslate2's variable names."""
    import numpy as np

    from tf_transformer.checkpoints import load_translation_model
    from tf_transformer.data.source_ids import truncate_source
    from tf_transformer.decoding.settings import parse_max_decode_length, recorded_settings
    from tf_transformer.layers.position import sinusoidal_table

    decoding = recorded_settings(pathlib.Path(model_dir)) or {}
    if average_last is not None:
        decoding["average_last"] = average_last
    model, tokenizer, config = load_translation_model(model_dir, average_last=decoding.get("average_last"))
    if not config.norm_first or config.position_encoding != "sinusoidal" or config.activation != "relu":
        sys.exit("error: the converter handles pre-norm, sinusoidal, ReLU models (the Multi30k recipe's).")
    weights = {variable.path: np.asarray(variable.numpy(), np.float32) for variable in model.weights}
    np.savez(output_dir / "ct2_weights.npz", **ct2_variables(weights, config))
    np.save(output_dir / "position_table.npy", sinusoidal_table(config.max_length, config.d_model).astype(np.float32))
    tokens = tokenizer.tokenize(sentences)
    source_ids = [truncate_source(row, config.max_length, config.eos_id).tolist() for row in tokens.to_list()]
    names = [NAME.format(i) for i in range(config.vocab_size)]
    unk_id = 3  # ids 0-3: padding, BOS, EOS, unknown (Tokenizer.special_tokens)
    for token_id, name in ((config.bos_id, "<s>"), (config.eos_id, "</s>"), (unk_id, "<unk>")):
        names[token_id] = name
    cap = parse_max_decode_length(decoding.get("max_decode_length", "1.5x+10"))
    caps = [
        min(cap.max_decode_length or int(cap.ratio * len(ids)) + cap.extra, config.max_length) for ids in source_ids
    ]
    work = {
        "vocabulary": names, "source_ids": source_ids, "caps": caps, "num_heads": config.num_heads,
        "layers": [config.num_encoder_layers, config.num_decoder_layers], "epsilon": config.layer_norm_epsilon,
        "beam_size": decoding.get("beam_size", 4), "length_penalty": decoding.get("length_penalty", 0.6),
        "no_repeat_ngram_size": decoding.get("no_repeat_ngram_size", 0), "output_dir": str(output_dir),
    }  # fmt: skip
    (output_dir / "work.json").write_text(json.dumps(work))
    return {"sentences": len(sentences), "decoding": decoding}


def ct2_variables(weights: dict, config) -> dict:
    """CTranslate2 variable name -> array, from the Keras weights (`transformer/...` paths). CTranslate2 stores a
    linear layer as [out, in] and fuses self-attention's Q, K, V (cross-attention's K, V) in that order, heads
    contiguous within each, as our kernels (fused K|V) are."""
    import numpy as np

    embeddings = weights["transformer/shared_embedding/embeddings"]
    out = {"encoder/embeddings_0/weight": embeddings, "decoder/embeddings/weight": embeddings,
           "decoder/projection/weight": embeddings,
           "decoder/projection/bias": np.zeros(config.vocab_size, np.float32)}  # fmt: skip

    def linear(target, kernels, biases):
        out[f"{target}/weight"] = np.concatenate([weights[k] for k in kernels], axis=1).T.copy()
        out[f"{target}/bias"] = np.concatenate([weights[b] for b in biases])

    def norm(target, source):
        out[f"{target}/gamma"], out[f"{target}/beta"] = weights[f"{source}/gamma"], weights[f"{source}/beta"]

    for side, count in (("encoder", config.num_encoder_layers), ("decoder", config.num_decoder_layers)):
        for index in range(count):
            ours, theirs = f"transformer/{side}/layer_{index}", f"{side}/layer_{index}"
            attention = f"{ours}/self_attention"
            linear(f"{theirs}/self_attention/linear_0", [f"{attention}/query_kernel", f"{attention}/key_value_kernel"],
                   [f"{attention}/query_bias", f"{attention}/key_value_bias"])  # fmt: skip
            linear(f"{theirs}/self_attention/linear_1", [f"{attention}/output_kernel"], [f"{attention}/output_bias"])
            norm(f"{theirs}/self_attention/layer_norm", f"{ours}/self_attention_norm")
            if side == "decoder":
                cross = f"{ours}/cross_attention"
                for number, part in enumerate(("query", "key_value", "output")):
                    linear(f"{theirs}/attention/linear_{number}", [f"{cross}/{part}_kernel"], [f"{cross}/{part}_bias"])
                norm(f"{theirs}/attention/layer_norm", f"{ours}/cross_attention_norm")
            for number, part in enumerate(("inner", "outer")):
                linear(f"{theirs}/ffn/linear_{number}", [f"{ours}/feed_forward/{part}/kernel"],
                       [f"{ours}/feed_forward/{part}/bias"])  # fmt: skip
            norm(f"{theirs}/ffn/layer_norm", f"{ours}/feed_forward_norm")
        norm(f"{side}/layer_norm", f"transformer/{side}/final_norm")
    return out


def run_tft_translate(args, output_dir: pathlib.Path) -> dict:
    output = output_dir / "tft.txt"
    command = [str(pathlib.Path(sys.executable).with_name("tft-translate")), f"--model_dir={args.model_dir}",
               f"--input={output_dir / 'sources.txt'}", f"--output={output}",
               *([f"--average_last={args.average_last}"] if args.average_last else [])]  # fmt: skip
    (output_dir / "sources.txt").write_text("".join(line + "\n" for line in read_lines(args.sources)), "utf-8")
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"error: tft-translate failed:\n{done.stderr[-3000:]}")
    precision = [line.split("] ", 1)[1] for line in done.stderr.splitlines() if "Precision:" in line]
    return {"seconds_end_to_end": round(seconds, 1), "output": str(output), "precision": precision[:1]}


def run_ctranslate2(args, output_dir: pathlib.Path, compute_type: str) -> dict:
    work = json.loads((output_dir / "work.json").read_text())
    work.update(compute_type=compute_type, threads=args.threads)
    path = output_dir / f"work_{compute_type}.json"
    path.write_text(json.dumps(work))
    start = time.perf_counter()
    done = subprocess.run([args.ct2_python, __file__, f"--ct2={path}"], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"error: the CTranslate2 process failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    ids = json.loads((output_dir / f"ct2_{compute_type}_ids.json").read_text())
    output = output_dir / f"ct2_{compute_type}.txt"
    write_detokenized(args.model_dir, ids, output)
    return {"seconds_end_to_end": round(seconds, 1), "seconds_decoding": round(result["seconds"], 1),
            "output": str(output)}  # fmt: skip


def translate_with_ctranslate2(path: pathlib.Path) -> None:
    """The child process: builds the CTranslate2 model once per output folder, translates, writes the output ids."""
    import ctranslate2
    import numpy as np
    from ctranslate2.converters.converter import Converter
    from ctranslate2.specs import model_spec, transformer_spec

    work = json.loads(path.read_text())
    output_dir = pathlib.Path(work["output_dir"])

    class Weights(Converter):
        def _load(self):
            spec = transformer_spec.TransformerSpec.from_config(tuple(work["layers"]), work["num_heads"], pre_norm=True)
            spec.config.layer_norm_epsilon = work["epsilon"]
            for name, value in np.load(output_dir / "ct2_weights.npz").items():
                scope, attribute = name.rsplit("/", 1)
                setattr(model_spec.index_spec(spec, scope), attribute, value)
            table = np.load(output_dir / "position_table.npy")
            spec.encoder.position_encodings.encodings = table
            spec.decoder.position_encodings.encodings = table
            spec.register_source_vocabulary(work["vocabulary"])
            spec.register_target_vocabulary(work["vocabulary"])
            return spec

    model = output_dir / "ct2_model"
    Weights().convert(str(model), force=True)
    start = time.perf_counter()
    translator = ctranslate2.Translator(str(model), device="cpu", compute_type=work["compute_type"],
                                        inter_threads=1, intra_threads=work["threads"])  # fmt: skip
    by_cap = collections.defaultdict(list)
    for index, cap in enumerate(work["caps"]):
        by_cap[cap].append(index)
    names, ids = work["vocabulary"], {name: i for i, name in enumerate(work["vocabulary"])}
    outputs = [None] * len(work["caps"])
    for cap, indices in sorted(by_cap.items()):
        batch = [[names[i] for i in work["source_ids"][index]] for index in indices]
        results = translator.translate_batch(
            batch, beam_size=work["beam_size"], length_penalty=work["length_penalty"], max_batch_size=64,
            no_repeat_ngram_size=work["no_repeat_ngram_size"], max_decoding_length=cap,
        )  # fmt: skip
        for index, result in zip(indices, results, strict=True):
            outputs[index] = [ids[token] for token in result.hypotheses[0]]
    seconds = time.perf_counter() - start
    (output_dir / f"ct2_{work['compute_type']}_ids.json").write_text(json.dumps(outputs))
    print(json.dumps({"seconds": seconds}))


def write_detokenized(model_dir, ids, output: pathlib.Path) -> None:
    import tensorflow as tf

    from tf_transformer.data.tokenizer import Tokenizer
    from tf_transformer.model_dir import VOCAB_DIR

    tokenizer = Tokenizer.from_directory(pathlib.Path(model_dir) / VOCAB_DIR)
    texts = tokenizer.detokenize(tf.ragged.constant(ids, dtype=tf.int32)).numpy()
    output.write_text("".join(text.decode("utf-8") + "\n" for text in texts), "utf-8")


def score(args, output_dir: pathlib.Path, results: dict) -> dict:
    from tf_transformer.evaluation.bleu import score_translations

    references = read_lines(args.references)
    for result in results.values():
        hypotheses = pathlib.Path(result["output"]).read_text("utf-8").splitlines()
        scores = score_translations(hypotheses, references, lowercase=args.lowercase)
        result.update({key: round(scores[key], 2) for key in ("bleu", "chrf", "tok_lower_bleu") if key in scores})
        for key in ("seconds_end_to_end", "seconds_decoding"):
            if key in result:
                result[key.replace("seconds", "sentences_per_second")] = round(len(references) / result[key], 1)
    return results


def read_lines(path) -> list:
    from tf_transformer.data.text_files import read_lines as lines_of

    return list(lines_of(path))


if __name__ == "__main__":
    main()
