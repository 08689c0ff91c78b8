"""A token classifier fine-tuned by transformers' own Trainer, as a user trains one, to be used as
a seqdistill teacher (issue 65, item 3). Nothing of seqdistill is used here: the point is a model
made outside this tool.

    .venv/bin/python examples/trainer_teacher.py --encoder DIR_OR_HUB_ID --train train.txt \
        --dev dev.txt --out my-ner/

It follows transformers' token-classification example: words split as in the CoNLL file, the
first subword of each word labelled and the others -100, ``AutoModelForTokenClassification``,
``Trainer``, then ``trainer.save_model`` and the tokenizer saved beside it. The dev set is scored
by the model's own loss each epoch and the best epoch kept (``load_best_model_at_end``).
Decisions (issue 65's measurement on the demo's data): lr 1e-4 with 10% warm-up, batch 16,
3 epochs: the budget of the demo's CRF teacher (2 epochs at 1e-4, batch 32) plus one epoch, since
a plain softmax head has no layer-wise rates; seed 13.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def read_conll(path: str) -> list[tuple[list[str], list[str]]]:
    """(words, tags) of each sentence: the first column and the last, -DOCSTART- lines skipped."""
    sentences, words, tags = [], [], []
    for line in Path(path).read_text(encoding="utf-8").splitlines() + [""]:
        cols = line.split()
        if not cols or cols[0] == "-DOCSTART-":
            if words:
                sentences.append((words, tags))
            words, tags = [], []
            continue
        words.append(cols[0])
        tags.append(cols[-1])
    return sentences


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--encoder", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()

    from transformers import (
        AutoModelForTokenClassification,
        AutoTokenizer,
        DataCollatorForTokenClassification,
        Trainer,
        TrainingArguments,
    )

    train, dev = read_conll(args.train), read_conll(args.dev)
    labels = sorted({t for _, tags in train + dev for t in tags}, key=lambda t: (t != "O", t[2:], t))
    label2id = {t: i for i, t in enumerate(labels)}
    tok = AutoTokenizer.from_pretrained(args.encoder)

    def encode(sentences):
        rows = []
        for words, tags in sentences:
            enc = tok(words, is_split_into_words=True, truncation=True, max_length=256)
            previous, ids = None, []
            for w in enc.word_ids():
                ids.append(-100 if w is None or w == previous else label2id[tags[w]])
                previous = w
            rows.append({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": ids})
        return rows

    model = AutoModelForTokenClassification.from_pretrained(
        args.encoder, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=label2id
    )
    out = Path(args.out)
    training = TrainingArguments(
        output_dir=str(out.with_name(out.name + "-runs")),
        num_train_epochs=args.epochs,
        learning_rate=args.lr,
        warmup_steps=0.1,  # a float: the share of all steps (transformers 5)
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64,
        eval_strategy="epoch",
        save_strategy="epoch",
        save_total_limit=1,
        load_best_model_at_end=True,
        report_to="none",
        use_cpu=True,
        seed=args.seed,
    )
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=encode(train),
        eval_dataset=encode(dev),
        data_collator=DataCollatorForTokenClassification(tok),
    )
    trainer.train(resume_from_checkpoint=any(Path(training.output_dir).glob("checkpoint-*")) or None)
    trainer.save_model(str(out))
    tok.save_pretrained(str(out))
    print(f"saved {out}: {len(labels)} labels, dev loss {trainer.evaluate()['eval_loss']:.4f}")


if __name__ == "__main__":
    main()
