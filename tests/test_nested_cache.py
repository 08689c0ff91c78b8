"""Nested entities through the whole pipeline (issue 9): JSONL spans -> a bilou-per-type teacher
fine-tuned on every entity -> the cache's entity_spans/entity_types -> the rnn recipe -> distill-eval
scoring every span; and the span-set metric by hand."""

import json
import random

import pyarrow.parquet as pq
import pytest
import torch

from seqdistill.bilou import layers_from_spans
from seqdistill.metrics import span_scores, span_set_scores


def test_span_set_scores_by_hand():
    gold = [[(0, 3, "ORG"), (2, 3, "LOC")], [(0, 1, "PER")]]
    pred = [[(0, 3, "ORG"), (1, 3, "LOC")], [(0, 1, "PER"), (2, 3, "LOC")]]
    s = span_set_scores(gold, pred, ["LOC", "ORG", "PER"])
    # LOC: 0 of 2 predicted right, 1 gold -> P 0, R 0; ORG 1/1; PER 1/1; micro: 2 right of 4 predicted, 3 gold
    assert s["per_type"]["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert s["per_type"]["ORG"]["f1"] == 1.0 and s["per_type"]["PER"]["f1"] == 1.0
    assert s["precision"] == pytest.approx(2 / 4) and s["recall"] == pytest.approx(2 / 3)
    assert s["f1"] == pytest.approx(2 * (1 / 2) * (2 / 3) / (1 / 2 + 2 / 3))
    assert s["macro_f1"] == pytest.approx(2 / 3) and s["exact_match"] == 0.0


def test_span_set_scores_equal_seqeval_on_flat_sequences():
    from seqdistill.cache_schema.labels import tags_to_spans

    rng = random.Random(0)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]

    def valid(n):  # I-X only after B-X or I-X
        out = []
        for _ in range(n):
            t = rng.choice(tags)
            if t.startswith("I-") and (not out or out[-1][2:] != t[2:]):
                t = "B-" + t[2:]
            out.append(t)
        return out

    gold = [valid(rng.randint(1, 8)) for _ in range(40)]
    pred = [valid(len(g)) for g in gold]
    flat = span_scores(gold, pred, "IOB2")
    sets = span_set_scores([tags_to_spans(g, "IOB2") for g in gold], [tags_to_spans(p, "IOB2") for p in pred])
    for k in ("precision", "recall", "f1", "macro_f1", "exact_match"):
        assert sets[k] == pytest.approx(flat[k]), k


def nested_jsonl(path, n, seed):
    """ "NAME visits the CITY eu": a PER, an ORG over "the CITY eu" with a LOC inside; or
    "NAME visits CITY": a PER and a LOC."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        name, city = rng.choice(["peter", "anna"]), rng.choice(["paris", "rome"])
        if rng.random() < 0.5:
            rows.append(
                {
                    "words": [name, "visits", "the", city, "eu"],
                    "entities": [[0, 1, "PER"], [2, 5, "ORG"], [3, 4, "LOC"]],
                }
            )
        else:
            rows.append({"words": [name, "visits", city], "entities": [[0, 1, "PER"], [2, 3, "LOC"]]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_nested_corpus_through_teacher_cache_student_and_eval(tiny_encoder, tmp_path):
    from click.testing import CliRunner
    from conftest import toy_corpus

    from seqdistill.cache_schema import CacheReader, verify_cache
    from seqdistill.cli.train import main as train_cli
    from seqdistill.corpora import derive_label_schema, read_corpus
    from seqdistill.deploy.evaluate import evaluate_taggers
    from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
    from seqdistill.students.common import read_spans
    from seqdistill.teachers import load_teacher
    from seqdistill.teachers.finetune import FinetuneConfig, finetune

    d = tmp_path
    train, dev = nested_jsonl(d / "train.jsonl", 60, 0), nested_jsonl(d / "dev.jsonl", 16, 1)
    schema, (tr, dv) = derive_label_schema([read_corpus(train, "n", "train"), read_corpus(dev, "n", "dev")])
    assert schema.entity_types == ("LOC", "ORG", "PER") and schema.scheme == "IOB2"
    summary = finetune(
        tiny_encoder,
        tr.sentences,
        dv.sentences,
        schema,
        d / "t",
        FinetuneConfig(head="bilou-per-type", epochs=6, batch_size=8, lr=1e-3, head_lr=1e-2),
        device="cpu",
        log=lambda *a: None,
    )
    assert summary["best_dev_f1"] > 0.5  # scored on every span, the LOC inside the ORG included

    specs = [
        CorpusSpec("n", train, "train", True),
        CorpusSpec("n", dev, "dev", True),
        CorpusSpec("raw", toy_corpus(d / "raw.txt", 10, 2, labelled=False), "unlabelled", False),
    ]
    build_cache(str(d / "cache"), str(d / "t"), specs, BuildConfig(device="cpu", dtype="fp32"), log=lambda *a: None)
    assert verify_cache(str(d / "cache")) == []
    reader = CacheReader(str(d / "cache"))
    assert [c.nested for c in reader.manifest.corpora] == [True, True, False]
    # plain pyarrow reads every entity; the flat tags hold the outermost ones
    table = pq.read_table(next((d / "cache" / "layers" / "examples").rglob("*.parquet")))
    source = [json.loads(line) for line in open(train)]
    first = table.slice(0, 1).to_pylist()[0]
    assert [[a, b, t] for (a, b), t in zip(first["entity_spans"], first["entity_types"])] == source[0]["entities"]
    if len(source[0]["words"]) == 5:
        assert first["tags"] == ["B-PER", "O", "B-ORG", "I-ORG", "I-ORG"]
    words, spans = read_spans(reader, ["n/train"])
    assert spans == [sorted(tuple(e) for e in r["entities"]) for r in source]
    # gold NLL of a nested row: every layer's entities, read back against the stored logits
    shard = reader.read_shard(0, {"t": ["type_logits", "gold_nll"]})
    logits, nll = shard.get("t", "type_logits"), shard.get("t", "gold_nll").to_pylist()
    types = list(schema.entity_types)
    for i in range(3):
        layers = torch.tensor(layers_from_spans(spans[i], len(words[i]), types))
        logp = torch.log_softmax(torch.as_tensor(logits[i]), -1).gather(-1, layers.unsqueeze(-1))
        assert nll[i] == pytest.approx(-logp.sum().item(), rel=1e-4)

    r = CliRunner().invoke(
        train_cli,
        [
            "--cache",
            str(d / "cache"),
            "--out",
            str(d / "s"),
            "--recipe",
            "rnn",
            "--cell",
            "sru",
            "--rnn-layers",
            "1",
            "--distill-epochs",
            "1",
            "--epochs",
            "2",
            "--batch-size",
            "8",
            "--device",
            "cpu",
        ],
    )
    assert r.exit_code == 0, (r.output, r.exception)
    record = json.loads((d / "s" / "training.json").read_text())["history"][-1]
    assert set(record["dev_per_type_f1"]) == {"LOC", "ORG", "PER"}

    rows = evaluate_taggers([str(d / "t"), str(d / "s")], dev, with_latency=False)
    assert all(row["nested"] for row in rows)
    teacher = load_teacher(d / "t")
    gold = [[tuple(e) for e in json.loads(line)["entities"]] for line in open(dev)]
    pred = teacher.predict_spans([json.loads(line)["words"] for line in open(dev)])
    assert rows[0]["f1"] == pytest.approx(span_set_scores(gold, pred, types)["f1"])
    assert 0 < rows[1]["params_without_embeddings"] < rows[1]["params"]


def test_corpus_records_and_overlaps_of_one_type(tmp_path):
    from seqdistill.cache_schema import CorpusInfo
    from seqdistill.corpora import CorpusError, derive_label_schema, read_corpus

    old = {
        "name": "c",
        "split": "train",
        "labelled": True,
        "source": "x",
        "sha256": "0" * 64,
        "examples": 1,
        "words": 2,
    }  # a manifest entry written before nested corpora
    assert CorpusInfo.from_json(old).nested is False and CorpusInfo.from_json({**old, "nested": True}).nested
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"words": ["a", "b"], "entities": []})
        + "\n"
        + json.dumps({"words": ["a", "b", "c"], "entities": [[0, 2, "X"], [1, 3, "X"]]})
        + "\n"
    )
    with pytest.raises(CorpusError, match="bad.jsonl:2: two X entities overlap"):  # finetune-teacher reads this way
        derive_label_schema([read_corpus(bad, "b", "train")])


def test_unlabelled_sample_over_several_corpora():
    from types import SimpleNamespace as NS

    from seqdistill.students.data import sample_unlabelled

    corpora = [
        NS(name="gold", split="train", labelled=True, examples=50),
        NS(name="a", split="u", labelled=False, examples=3),
        NS(name="empty", split="u", labelled=False, examples=0),
        NS(name="b", split="u", labelled=False, examples=5),
    ]
    reader = NS(manifest=NS(corpora=corpora))
    select = {("gold", "train"), ("a", "u"), ("empty", "u"), ("b", "u")}
    every = sample_unlabelled(reader, select, 8, seed=0)
    assert every == {("a", "u"): {0, 1, 2}, ("empty", "u"): set(), ("b", "u"): {0, 1, 2, 3, 4}}
    some = sample_unlabelled(reader, select, 4, seed=3)
    assert sum(map(len, some.values())) == 4 and some == sample_unlabelled(reader, select, 4, seed=3)
    assert all(i < {"a": 3, "b": 5, "empty": 0}[c] for (c, _), idx in some.items() for i in idx)
    assert sample_unlabelled(reader, {("gold", "train"), ("b", "u")}, 2, seed=0).keys() == {("b", "u")}
