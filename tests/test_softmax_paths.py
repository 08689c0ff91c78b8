"""Issue 65, item 3: any token classifier as a full MGKD teacher. A softmax teacher's layer holds
k-best paths, global log-probabilities, log Z and marginals under its scheme CRF (log-softmax
emissions, transitions 0 where the scheme allows a step and -inf where it forbids one:
teachers/paths.py), checked here against brute-force enumeration of every path; and a token
classifier fine-tuned by transformers' own Trainer, saved as a user saves one, teaches mgkd with
all its losses."""

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import toy_corpus

from seqdistill.cache_schema import LabelSchema

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def _brute_force(log_p: np.ndarray, schema: LabelSchema):
    """Every path of a sentence valid in the scheme, with its log-probability under the factorised
    softmax renormalised over valid paths: (log Z, [(log-prob, path)] best first, marginals)."""
    start, trans, end = schema.allowed()
    n, T = log_p.shape
    scored = []
    for path in itertools.product(range(T), repeat=n):
        ok = start[path[0]] and end[path[-1]] and all(trans[a, b] for a, b in zip(path, path[1:]))
        if ok:
            scored.append((float(sum(log_p[t, y] for t, y in enumerate(path))), path))
    log_z = float(np.logaddexp.reduce([s for s, _ in scored]))
    ranked = sorted(((s - log_z, p) for s, p in scored), key=lambda x: -x[0])
    marg = np.zeros((n, T))
    for lp, path in ranked:
        marg[np.arange(n), list(path)] += np.exp(lp)
    return log_z, ranked, marg


def test_a_softmax_teachers_paths_and_marginals_are_those_of_brute_force(tiny_encoder):
    from seqdistill.teachers import build_teacher

    schema = LabelSchema("IOB2", ("LOC", "PER"))
    teacher = build_teacher(tiny_encoder, schema, "softmax", seed=3).eval()
    with torch.no_grad():  # a head far from uniform, so that many argmax paths break the scheme
        teacher.classifier.weight.normal_(0, 2.0)
    words = [["peter", "visits", "rome"], ["anna"], ["the", "eu", "visits", "paris"]]
    K = 6
    out = teacher.outputs(words, k=K, marginals=True)
    log_p = torch.log_softmax(out.logits.float(), -1)
    broken = 0
    for b, sentence in enumerate(words):
        n = len(sentence)
        log_z, ranked, marg = _brute_force(log_p[b, :n].numpy(), schema)
        assert float(out.log_z[b]) == pytest.approx(log_z, abs=1e-5)
        assert log_z <= 1e-6  # the factorised model's mass on valid paths
        assert np.allclose(out.marginals[b, :n].numpy(), marg, atol=1e-5)
        got = out.kbest_log_probs[b].numpy()
        expected = np.array([lp for lp, _ in ranked[:K]])
        assert np.allclose(got[: len(expected)], expected, atol=1e-5)
        assert np.all(np.isneginf(got[len(expected) :]))  # fewer valid paths than K: the rest invalid
        by_path = {path: lp for lp, path in ranked}
        for j in range(len(expected)):  # each path is valid and carries its own probability (ties in any order)
            path = tuple(out.kbest_paths[b, j, :n].tolist())
            assert by_path[path] == pytest.approx(float(got[j]), abs=1e-5)
        argmax = tuple(log_p[b, :n].argmax(-1).tolist())
        broken += argmax != ranked[0][1]
    assert broken >= 1  # the scheme CRF changed at least one best path here: the test tells them apart


def _trainer_model(tiny_encoder: str, train: str, out: Path) -> None:
    """A token classifier fine-tuned by transformers' Trainer (first subword labelled, -100 on the
    others, as transformers' token-classification example does) and saved as a user saves one."""
    from transformers import (
        AutoTokenizer,
        BertForTokenClassification,
        DataCollatorForTokenClassification,
        Trainer,
        TrainingArguments,
    )

    tok = AutoTokenizer.from_pretrained(tiny_encoder)
    label2id = {t: i for i, t in enumerate(LABELS)}
    sentences = [s.split("\n") for s in Path(train).read_text().strip().split("\n\n")]
    rows = []
    for lines in sentences:
        words, tags = zip(*(line.split() for line in lines))
        enc = tok(list(words), is_split_into_words=True, truncation=True)
        previous, labels = None, []
        for w in enc.word_ids():
            labels.append(-100 if w is None or w == previous else label2id[tags[w]])
            previous = w
        rows.append({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "labels": labels})
    torch.manual_seed(0)
    model = BertForTokenClassification.from_pretrained(
        tiny_encoder, num_labels=len(LABELS), id2label=dict(enumerate(LABELS)), label2id=label2id
    )
    args = TrainingArguments(
        output_dir=str(out.parent / "trainer-runs"),
        num_train_epochs=8,
        per_device_train_batch_size=8,
        learning_rate=5e-3,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=DataCollatorForTokenClassification(tok))
    trainer.train()
    trainer.save_model(str(out))
    tok.save_pretrained(str(out))


def _run(tool: str, *args) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / tool
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=env)


def test_a_trainer_made_token_classifier_teaches_mgkd_with_every_loss(tiny_encoder, tmp_path):
    train = toy_corpus(tmp_path / "train.txt", 48, 0)
    dev = toy_corpus(tmp_path / "dev.txt", 16, 1)
    raw = toy_corpus(tmp_path / "raw.txt", 24, 2, labelled=False)
    _trainer_model(tiny_encoder, train, tmp_path / "my-ner")
    assert not (tmp_path / "my-ner" / "teacher.json").exists()  # a plain Hugging Face checkpoint
    cache = tmp_path / "cache"
    corpora = ["--labelled", f"toy={train}", "--labelled", f"toy={dev}@dev", "--unlabelled", f"raw={raw}"]
    r = _run("distill-cache", "build", "--out", cache, "--teacher", tmp_path / "my-ner", "--kbest", "4", *corpora)
    assert r.returncode == 0, r.stderr
    manifest = json.loads((cache / "manifest.json").read_text())
    (teacher,) = manifest["teachers"]
    assert teacher["kind"] == "softmax" and teacher["decoding"]["k"] == 4
    (layer,) = [layer for layer in manifest["layers"] if layer["name"] == "my-ner"]
    fields = {f["name"] for f in layer["fields"]}
    assert {"logits", "kbest_paths", "kbest_log_probs", "log_z", "marginals"} <= fields

    every = "hard,seq-ce,fuzzy,token-em,token-pos"
    out = tmp_path / "student"
    r = _run(
        "distill-train", "mgkd", "--cache", cache, "--out", out, "--losses", every, "--k", "4",
        "--epochs", "8", "--batch-size", "8", "--hidden-size", "16", "--lr", "1e-2", "--device", "cpu",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for name in every.split(","):  # every loss took part, with a finite value, in every epoch
        assert all(np.isfinite(r[f"loss_{name}"]) for r in records), name
    assert max(r["dev_f1"] for r in records) >= 0.9  # the toy task is learnt from this teacher

    # a layer without a loss's fields is refused by the fields' names, not read as zeros
    r = _run(
        "distill-cache", "build", "--out", tmp_path / "thin", "--teacher", tmp_path / "my-ner", "--no-marginals",
        *corpora,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = _run(
        "distill-train", "mgkd", "--cache", tmp_path / "thin", "--out", tmp_path / "s2", "--losses", "hard,token-pos"
    )
    assert r.returncode != 0 and "token-pos reads marginals" in r.stderr
    assert not (tmp_path / "s2" / "model.safetensors").exists()


@pytest.mark.parametrize(
    "labels, said",
    [
        (["LABEL_0", "LABEL_1", "LABEL_2"], "labels have no names (LABEL_0, LABEL_1, LABEL_2): set id2label"),
        (["O", "PER", "LOC"], "mark no span boundaries (no B-/I- prefixes: an IO tagger)"),
        (["O", "B-PER", "I-PER", "X"], "fit no tag scheme"),
        (None, "a plain encoder has no tagging head"),
    ],
)
def test_a_token_classifier_whose_labels_are_not_spans_is_refused_by_name(tiny_encoder, tmp_path, labels, said):
    from transformers import AutoModel, AutoTokenizer, BertForTokenClassification

    from seqdistill.teachers import TeacherError, load_teacher

    if labels is None:
        AutoModel.from_pretrained(tiny_encoder).save_pretrained(tmp_path)
    else:
        BertForTokenClassification.from_pretrained(
            tiny_encoder,
            num_labels=len(labels),
            id2label=dict(enumerate(labels)),
            label2id={t: i for i, t in enumerate(labels)},
        ).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(tiny_encoder).save_pretrained(tmp_path)
    with pytest.raises(TeacherError, match=re.escape(said)):
        load_teacher(str(tmp_path))
