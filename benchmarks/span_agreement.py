"""How the semi-CRF's best path of a GLiNER teacher agrees with the model's own greedy decode
(issue 71), and what each scores, on one labelled file.

    .venv/bin/python benchmarks/span_agreement.py --teacher .data/gliner/minilm-conll2k \
        --entity-types person=PER,organization=ORG,location=LOC,miscellaneous=MISC \
        --data .data/demo/test.txt [--threshold 0.5] [--temperature 1.0]

For each sentence: the model's own decoding (``SpanScorer.greedy``: the package's greedy search
over the spans above the threshold, as ``predict_entities(flat_ner=True)``) and the semi-CRF's best
segmentation (``phi = (l + b) / T``, ``b = -logit(threshold)``: the cache's first k-best path).
Reported: the share of sentences whose two tag sequences are identical, the share of the spans of
either found by both, each one's span F1 against the gold, and the mean probability the semi-CRF
gives its best path. One process, the teacher in torch on the CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--entity-types", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()

    import math

    import torch

    from seqdistill.cache_schema.labels import spans_to_tags, tags_to_spans
    from seqdistill.corpora import read_corpus
    from seqdistill.metrics import span_scores
    from seqdistill.teachers import LayerOptions, SpanOptions, load_teacher, parse_entity_types

    span = SpanOptions(parse_entity_types(args.entity_types), args.threshold, args.temperature)
    teacher = load_teacher(args.teacher, options=LayerOptions(1, span=span))
    data = read_corpus(args.data, "data", "test").to_scheme("IOB2")
    words = [s.words for s in data.sentences]
    gold = [s.tags for s in data.sentences]
    tags = teacher.schema.entity_types  # the type axis of the teacher's outputs
    greedy, best, best_p = [], [], []
    with torch.inference_mode():
        for s in range(0, len(words), args.batch_size):
            batch = words[s : s + args.batch_size]
            out = teacher.outputs(batch, k=1, marginals=False, precision="fp32")  # the raw span logits, once
            for j, (w, spans) in enumerate(zip(batch, teacher.scorer.greedy_spans(out.logits, args.threshold))):
                greedy.append(spans_to_tags([(a, b, tags[c]) for a, b, c in spans], len(w), "IOB2"))
                best.append(teacher.schema.decode(out.kbest_paths[j, 0, : len(w)].tolist()))
                best_p.append(math.exp(float(out.kbest_log_probs[j, 0])))
    same = sum(a == b for a, b in zip(greedy, best)) / len(words)
    a_spans = [set(tags_to_spans(t, "IOB2")) for t in greedy]
    b_spans = [set(tags_to_spans(t, "IOB2")) for t in best]
    both = sum(len(x & y) for x, y in zip(a_spans, b_spans))
    either = sum(len(x | y) for x, y in zip(a_spans, b_spans))
    report = {
        "sentences": len(words),
        "threshold": args.threshold,
        "bias": span.bias,
        "temperature": args.temperature,
        "identical_sentences": round(100 * same, 2),
        "spans_in_both_of_either": round(100 * both / max(either, 1), 2),
        "greedy_f1": round(100 * span_scores(gold, greedy, "IOB2")["f1"], 2),
        "semicrf_best_path_f1": round(100 * span_scores(gold, best, "IOB2")["f1"], 2),
        "mean_best_path_probability": round(sum(best_p) / len(best_p), 4),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
