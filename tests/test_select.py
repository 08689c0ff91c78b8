"""``distill-cache select`` (issue 37): rows to annotate next, scored from the cache alone; the two
best paths checked against brute-force enumeration."""

import itertools
import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import toy_corpus
from safetensors.numpy import load

from seqdistill.cache_schema import EXAMPLES_LAYER, CacheError, CacheReader, LabelSchema
from seqdistill.cli.cache import main as cache_cli
from seqdistill.corpora import read_corpus
from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
from seqdistill.pipeline.select import diverse, select_rows
from seqdistill.teachers import build_teacher

SCHEMA = LabelSchema("IOB2", ("LOC", "PER"))


@pytest.fixture(scope="module")
def cache(tiny_encoder, tmp_path_factory):
    """Toy corpora with two teacher layers: a CRF (k = 4) and a softmax tagger, random heads."""
    d = tmp_path_factory.mktemp("select")
    specs = [
        CorpusSpec("toy", toy_corpus(d / "train.txt", 20, 0), "train", True),
        CorpusSpec("raw", toy_corpus(d / "raw.txt", 40, 2, labelled=False), "unlabelled", False),
    ]
    for kind, seed in (("crf", 1), ("softmax", 2)):
        torch.manual_seed(seed)
        teacher = build_teacher(tiny_encoder, SCHEMA, kind)
        with torch.no_grad():
            for p in teacher.classifier.parameters():
                p.copy_(torch.randn(p.shape))
        teacher.save(d / kind)
        cfg = BuildConfig(device="cpu", k=4 if kind == "crf" else None)
        build_cache(str(d / "cache"), str(d / kind), specs, cfg, teacher_id=kind, log=lambda *a: None)
    return str(d / "cache")


def _rows(reader, teacher, fields):
    out = {}
    for shard in reader.iter_shards({EXAMPLES_LAYER: ["split", "words"], teacher: fields}):
        for i in range(len(shard)):
            if shard.get(EXAMPLES_LAYER, "split")[i].as_py() == "unlabelled":
                out[shard.example_ids[i]] = shard.row(i)
    return out


def _crf_two_best(emissions, crf):
    """The two best paths' probabilities by enumerating every tag sequence."""
    scores = []
    for path in itertools.product(range(emissions.shape[1]), repeat=emissions.shape[0]):
        s = crf["start"][path[0]] + crf["end"][path[-1]] + sum(emissions[i, t] for i, t in enumerate(path))
        s += sum(crf["transitions"][a, b] for a, b in zip(path, path[1:]))
        scores.append(s)
    scores = np.array(scores, dtype=np.float64)
    p = np.exp(scores - np.logaddexp.reduce(scores[np.isfinite(scores)]))
    top = np.sort(p)[::-1]
    return top[0], top[1]


def test_uncertainty_and_margin_are_the_two_best_paths_by_brute_force(cache):
    reader = CacheReader(cache)
    crf = load(reader.read_export("crf", "crf.safetensors"))
    rows = _rows(reader, "crf", ["emissions"])
    for strategy in ("uncertainty", "margin"):
        picks = select_rows(reader, strategy, 40, teachers=["crf"], diversity=1.0)
        assert [p.score for p in picks] == sorted((p.score for p in picks), reverse=True)
        for p in [q for q in picks if len(q.words) <= 5][:3]:
            p1, p2 = _crf_two_best(np.asarray(rows[p.example_id]["crf"]["emissions"], dtype=np.float64), crf)
            want = 1 - p1 if strategy == "uncertainty" else 1 - (p1 - p2)
            assert p.score == pytest.approx(want, abs=2e-3)  # emissions are stored fp16


def test_a_token_teachers_two_best_paths_by_brute_force(cache):
    reader = CacheReader(cache)
    rows = _rows(reader, "softmax", ["logits"])
    picks = {p.example_id: p.score for p in select_rows(reader, "margin", 40, teachers=["softmax"], diversity=1.0)}
    unc = {p.example_id: p.score for p in select_rows(reader, "uncertainty", 40, teachers=["softmax"], diversity=1.0)}
    for eid in list(picks)[:4]:
        logits = np.asarray(rows[eid]["softmax"]["logits"], dtype=np.float64)
        probs = np.exp(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))
        paths = sorted(
            (
                np.prod([probs[i, t] for i, t in enumerate(path)])
                for path in itertools.product(range(probs.shape[1]), repeat=probs.shape[0])
            ),
            reverse=True,
        )
        assert unc[eid] == pytest.approx(1 - paths[0], abs=1e-9)
        assert picks[eid] == pytest.approx(1 - (paths[0] - paths[1]), abs=1e-9)


def test_disagreement_counts_words_where_the_teachers_best_tags_differ(cache):
    reader = CacheReader(cache)
    crf, soft = _rows(reader, "crf", ["kbest_paths"]), _rows(reader, "softmax", ["logits"])
    picks = select_rows(reader, "disagreement", 40, diversity=1.0)
    for p in picks[:5]:
        a = np.asarray(crf[p.example_id]["crf"]["kbest_paths"][0])
        b = np.asarray(soft[p.example_id]["softmax"]["logits"]).argmax(1)
        assert p.score == pytest.approx(float((a != b).mean()))
    with pytest.raises(CacheError, match="disagreement compares teachers: the cache has 1 teacher layer"):
        select_rows(reader, "disagreement", 5, teachers=["crf"])
    with pytest.raises(CacheError, match=r"reads one teacher: the cache holds crf, softmax; choose one with --teacher"):
        select_rows(reader, "uncertainty", 5)


def test_random_is_seeded_and_diversity_skips_near_duplicates(cache):
    reader = CacheReader(cache)
    a = select_rows(reader, "random", 10, seed=1, diversity=1.0)
    assert [p.example_id for p in a] == [p.example_id for p in select_rows(reader, "random", 10, seed=1, diversity=1.0)]
    assert [p.example_id for p in a] != [p.example_id for p in select_rows(reader, "random", 10, seed=2, diversity=1.0)]
    # the toy sentences repeat a few templates: without the rule, exact repeats are picked
    plain = select_rows(reader, "uncertainty", 10, teachers=["crf"], diversity=1.0)
    varied = select_rows(reader, "uncertainty", 10, teachers=["crf"], diversity=0.7)
    sets = [{w.lower() for w in p.words} for p in varied]
    assert all(len(x & y) < 0.7 * len(x | y) for x, y in itertools.combinations(sets, 2))
    assert len({tuple(sorted(s)) for s in sets}) == len(varied) < len(plain) or len(varied) < 10
    assert [p.example_id for p in diverse(plain, 3, 1.0)] == [p.example_id for p in plain[:3]]


def test_cli_writes_jsonl_that_reads_back_as_unlabelled_text(cache, tmp_path):
    out = tmp_path / "pick.jsonl"
    r = CliRunner().invoke(
        cache_cli,
        [
            "select",
            cache,
            "--strategy",
            "margin",
            "--n",
            "5",
            "--out",
            str(out),
            "--teacher",
            "crf",
            "--diversity",
            "1",
        ],
    )
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 5 and {x["corpus"] for x in lines} == {"raw"} and all(x["strategy"] == "margin" for x in lines)
    back = read_corpus(out, "pick", "unlabelled", labelled=False)
    assert [s.words for s in back.sentences] == [x["words"] for x in lines]
    r = CliRunner().invoke(
        cache_cli, ["select", cache, "--strategy", "margin", "--n", "5", "--out", str(out), "--corpus", "wiki"]
    )
    assert (
        r.exit_code == 1
        and "--corpus 'wiki': the cache has no such corpus; it holds: toy/train, raw/unlabelled" in r.output
    )


def test_label_studio_and_span_jsonl_round_trip_to_a_labelled_corpus(cache, tmp_path):
    from seqdistill.cache_schema.labels import tags_to_spans

    reader = CacheReader(cache)
    ls, spans = tmp_path / "tasks.json", tmp_path / "spans.jsonl"
    for fmt, out in (("label-studio", ls), ("spans", spans)):
        args = ["select", cache, "--strategy", "uncertainty", "--teacher", "crf", "--n", "4", "--out", str(out)]
        r = CliRunner().invoke(cache_cli, [*args, "--format", fmt, "--diversity", "1"])
        assert r.exit_code == 0, r.output
    assert '<Label value="PER"/>' in (tmp_path / "tasks.json.config.xml").read_text()
    tasks = json.loads(ls.read_text())
    rows = _rows(reader, "crf", ["kbest_paths"])
    for task in tasks:  # the prediction is the teacher's best path, at the words' character offsets
        words, (pred,) = task["data"]["words"], task["predictions"]
        best = [SCHEMA.tags[t] for t in rows[task["data"]["example_id"]]["crf"]["kbest_paths"][0]]
        got = [(r["value"]["start"], r["value"]["end"], r["value"]["labels"][0]) for r in pred["result"]]
        text = task["data"]["text"]
        want = [
            (len(" ".join(words[:s])) + (s > 0), len(" ".join(words[:e])), t) for s, e, t in tags_to_spans(best, "IOB2")
        ]
        assert got == want and all(text[a:b] == r["value"]["text"] for (a, b, _), r in zip(got, pred["result"]))
        assert 0 <= pred["score"] <= 1 and all(0 <= r["score"] <= 1 for r in pred["result"])
    # annotators: accept the first task's prediction, relabel a partial word in the second, cancel the third
    tasks[0]["annotations"] = [{"result": tasks[0]["predictions"][0]["result"]}]
    second = tasks[1]["data"]["text"]
    tasks[1]["annotations"] = [
        {"result": [{"type": "labels", "value": {"start": 1, "end": 3, "labels": ["LOC"]}}]},
    ]
    tasks[2]["annotations"] = [{"result": [], "was_cancelled": True}]
    ls.write_text(json.dumps(tasks))
    corpus = read_corpus(f"ls:{ls}", "ann")
    assert len(corpus.sentences) == 2 and corpus.notes == ["2 task(s) without a submitted annotation skipped"]
    first = [SCHEMA.tags[t] for t in rows[tasks[0]["data"]["example_id"]]["crf"]["kbest_paths"][0]]
    assert corpus.sentences[0].tags == first
    assert corpus.sentences[1].words == second.split(" ") and corpus.sentences[1].tags[0] == "B-LOC"
    assert set(corpus.sentences[1].tags[1:]) == {"O"}
    # span JSONL: the same spans, token indices inclusive; a rejected line is skipped
    lines = [json.loads(x) for x in spans.read_text().splitlines()]
    lines[3]["answer"] = "reject"
    spans.write_text("".join(json.dumps(x) + "\n" for x in lines))
    back = read_corpus(f"spans:{spans}", "sp")
    assert len(back.sentences) == 3 and back.notes == ["1 rejected or ignored line(s) skipped"]
    for line, s in zip(lines, back.sentences):
        assert s.words == [t["text"] for t in line["tokens"]]
        assert tags_to_spans(s.tags, "IOB2") == [
            (x["token_start"], x["token_end"] + 1, x["label"]) for x in line["spans"]
        ]


def test_overlapping_annotations_are_nested_entities_and_bad_spans_are_named(tmp_path):
    p = tmp_path / "ls.json"
    task = {
        "data": {"text": "Bank of Paris opens"},
        "annotations": [
            {
                "result": [
                    {"type": "labels", "value": {"start": 0, "end": 13, "labels": ["ORG"]}},
                    {"type": "labels", "value": {"start": 8, "end": 13, "labels": ["LOC"]}},
                ]
            }
        ],
    }
    p.write_text(json.dumps([task]))
    s = read_corpus(f"ls:{p}", "n").sentences[0]
    assert s.words == ["Bank", "of", "Paris", "opens"] and s.entities == [(0, 3, "ORG"), (2, 3, "LOC")]
    task["annotations"][0]["result"] = [{"type": "labels", "value": {"start": 4, "end": 5, "labels": ["ORG"]}}]
    p.write_text(json.dumps([task]))
    with pytest.raises(Exception, match=r"ls.json: row 0: span 4-5 \(ORG\) covers no word"):
        read_corpus(f"ls:{p}", "n")
