"""Train a GLiNER span-NER model (e.g. over MiniLM-L6) on CoNLL-style files with gliner's own Trainer.

    python examples/gliner_teacher.py --encoder DIR --train train.txt --dev dev.txt \
        --types person=PER,organization=ORG,location=LOC,miscellaneous=MISC --out OUT [--steps 1500]

Reads ``word TAG`` files (IOB or any scheme seqdistill detects), turns them into gliner's
``{"tokenized_text", "ner": [[start, end_inclusive, type_word]]}`` records, builds a fresh
``GLiNER.from_config`` span model (markerV0, max width 12) over the local encoder and trains it
with ``model.train_model`` and gliner's own ``TrainingArguments``. Every training sentence is
prompted with all the types (``ner_labels``), as at test time, so sentences without entities
and absent types are trained as negatives. It then scores the dev file with gliner's word-level
calls (``prepare_base_input`` -> ``collate_batch`` -> ``run_batch`` -> ``decode_batch``,
threshold 0.5, flat NER): exact-span-and-type micro P/R/F1, printed and written to
OUT/dev_f1.json, and saves the model as safetensors (``save_pretrained(OUT)``, loadable with
``GLiNER.from_pretrained(OUT)``).

Cost: MiniLM-L6 on 2,000 CoNLL sentences, batch 8, 1,500 steps (6 epochs), ``--threads 1``
took 33 minutes on 2 shared CPU cores and reached dev F1 85.1 on 600 CoNLL dev sentences
(``--threads 1`` is several times faster than torch's 2 threads when the cores are busy);
the dev evaluation takes under a minute.
"""

import argparse
import json
import os
import random
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from gliner import GLiNER  # noqa: E402
from gliner.training import TrainingArguments  # noqa: E402

from seqdistill.cache_schema.labels import detect_scheme, tags_to_spans  # noqa: E402
from seqdistill.corpora import read_corpus  # noqa: E402


def read_examples(path, names, limit=None):
    """gliner records of a CoNLL-style file; ``names`` maps tag types (PER) to type words (person)."""
    sentences = read_corpus(path, "c", "x").sentences[:limit]
    scheme = detect_scheme([s.tags for s in sentences])
    return [
        {
            "tokenized_text": list(s.words),
            "ner": [[start, end - 1, names[kind]] for start, end, kind in tags_to_spans(s.tags, scheme)],
        }
        for s in sentences
    ]


def predict(model, word_lists, types, batch_size=16, threshold=0.5):
    """(start, end_inclusive, type) sets per sentence, from gliner's word-level batch calls."""
    model.eval()
    found = []
    for i in range(0, len(word_lists), batch_size):
        batch = model.collate_batch(model.prepare_base_input(word_lists[i : i + batch_size]), types)
        output = model.run_batch(batch, threshold=threshold)
        for spans in model.decode_batch(output, batch, threshold=threshold, flat_ner=True):
            found.append({(s.start, s.end, s.entity_type) for s in spans})
    return found


def evaluate(model, examples, types, threshold=0.5):
    """Entity-level micro precision, recall and F1 (exact span and type)."""
    found = predict(model, [e["tokenized_text"] for e in examples], types, threshold=threshold)
    gold = [{tuple(span) for span in e["ner"]} for e in examples]
    tp = sum(len(f & g) for f, g in zip(found, gold))
    n_found, n_gold = sum(map(len, found)), sum(map(len, gold))
    p = tp / n_found if n_found else 0.0
    r = tp / n_gold if n_gold else 0.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": p, "recall": r, "f1": f1, "tp": tp, "predicted": n_found, "gold": n_gold}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--encoder", required=True, help="local Hugging Face encoder directory")
    ap.add_argument("--train", required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--types", required=True, help="word=TAG,... e.g. person=PER,organization=ORG")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--lr-encoder", type=float, default=5e-5)
    ap.add_argument("--lr-others", type=float, default=1e-4)
    ap.add_argument("--warmup", type=float, default=0.1, help="fraction of the steps")
    ap.add_argument("--focal-alpha", type=float, default=0.75, help="-1 disables")
    ap.add_argument("--focal-gamma", type=float, default=2.0)
    ap.add_argument("--loss-reduction", choices=["sum", "mean"], default="sum")
    ap.add_argument("--max-width", type=int, default=12)
    ap.add_argument("--hidden-size", type=int, default=256, help="gliner's head width (its default is 512)")
    ap.add_argument("--dropout", type=float, default=0.4)
    ap.add_argument("--threshold", type=float, default=0.5)
    ap.add_argument("--train-limit", type=int, help="first N training sentences only")
    ap.add_argument(
        "--sampled-types",
        action="store_true",
        help="gliner's default prompting: each sentence's own types plus in-batch negatives",
    )
    ap.add_argument(
        "--shuffle-types",
        action="store_true",
        help="each sentence's prompt lists the types in an order of its own (seeded); without it every prompt "
        "lists them in --types order, and the model learns to read them by position (docs/RESULTS.md, issue 71): "
        "then give distill-cache build --entity-types in that same order",
    )
    ap.add_argument("--eval-train", action="store_true", help="also score the training set")
    ap.add_argument("--threads", type=int, help="torch threads; 1 is several times faster on a busy CPU")
    args = ap.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    names = dict(reversed(pair.split("=", 1)) for pair in args.types.split(","))  # PER -> person
    types = list(names.values())
    train = read_examples(args.train, names, args.train_limit)
    dev = read_examples(args.dev, names)
    if not args.sampled_types:
        for example in train:
            example["ner_labels"] = random.sample(types, len(types)) if args.shuffle_types else types

    model = GLiNER.from_config(
        {
            "model_name": args.encoder,
            "span_mode": "markerV0",
            "max_width": args.max_width,
            "hidden_size": args.hidden_size,
            "dropout": args.dropout,
            "max_types": max(25, len(types)),
        }
    )
    with tempfile.TemporaryDirectory() as scratch:
        training_args = TrainingArguments(
            output_dir=scratch,  # nothing is saved there (save_strategy "no")
            max_steps=args.steps,
            per_device_train_batch_size=args.batch_size,
            learning_rate=args.lr_encoder,
            others_lr=args.lr_others,
            weight_decay=0.01,
            others_weight_decay=0.01,
            lr_scheduler_type="linear",
            warmup_steps=args.warmup,  # a float below 1 is a fraction of max_steps in transformers 5
            focal_loss_alpha=args.focal_alpha,
            focal_loss_gamma=args.focal_gamma,
            loss_reduction=args.loss_reduction,
            max_grad_norm=10.0,
            seed=args.seed,
            use_cpu=not torch.cuda.is_available(),
            dataloader_num_workers=0,
            save_strategy="no",
            logging_steps=max(1, args.steps // 30),
            report_to="none",
        )
        start = time.time()
        model.train_model(train_dataset=train, eval_dataset=None, training_args=training_args)
    train_seconds = time.time() - start

    result = {"dev": evaluate(model, dev, types, args.threshold)}
    if args.eval_train:
        result["train"] = evaluate(model, train, types, args.threshold)
    result.update(
        steps=args.steps,
        batch_size=args.batch_size,
        seed=args.seed,
        lr_encoder=args.lr_encoder,
        lr_others=args.lr_others,
        train_sentences=len(train),
        train_seconds=round(train_seconds),
        threshold=args.threshold,
        types=names,
    )
    model.save_pretrained(args.out, safe_serialization=True)
    with open(os.path.join(args.out, "dev_f1.json"), "w") as f:
        json.dump(result, f, indent=2)
    d = result["dev"]
    print(
        f"dev P {d['precision']:.4f} R {d['recall']:.4f} F1 {d['f1']:.4f} "
        f"({d['tp']}/{d['predicted']} predicted, {d['gold']} gold); trained {train_seconds:.0f}s"
    )
    if args.eval_train:
        print(f"train F1 {result['train']['f1']:.4f}")


if __name__ == "__main__":
    main()
