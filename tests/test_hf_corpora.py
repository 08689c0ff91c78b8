"""Hugging Face datasets as corpora (issue 21, item 2): ``hf:DIR[@SPLIT]`` save_to_disk directories,
Parquet and JSONL files with ``tokens`` and ``ner_tags`` columns, read by the one reader that every
command uses. The datasets are built with the ``datasets`` library inside the tests."""

import json
import re
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import CONLL, RAW
from test_build import QUIET, _assert_same, _cfg, _contents, teachers  # noqa: F401

from seqdistill.cache_schema import CacheReader, verify_cache
from seqdistill.cli.cache import main as cache_cli
from seqdistill.cli.evaluate import eval_main
from seqdistill.corpora import CorpusError, read_corpus
from seqdistill.pipeline.build import CorpusSpec, build_cache

# conll2003's ClassLabel order on the Hub: the ids are not the cache's tag ids
NAMES = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


def _conll_rows(text: str) -> list[tuple[list[str], list[str]]]:
    """The rows a datasets user has for a CoNLL file: one per sentence, -DOCSTART- rows kept (as
    the Hub's conll2003 keeps them)."""
    rows, words, tags = [], [], []
    for line in text.splitlines() + [""]:
        cols = line.split()
        if not cols:
            if words:
                rows.append((words, tags))
            words, tags = [], []
            continue
        words.append(cols[0])
        tags.append(cols[-1])
    return rows


def _dataset(rows, class_label: bool = True):
    datasets = pytest.importorskip("datasets")
    tag_feature = datasets.ClassLabel(names=NAMES) if class_label else datasets.Value("int64")
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "tokens": datasets.Sequence(datasets.Value("string")),
            "ner_tags": datasets.Sequence(tag_feature),
        }
    )
    return datasets.Dataset.from_dict(
        {
            "id": [str(i) for i in range(len(rows))],
            "tokens": [w for w, _ in rows],
            "ner_tags": [[NAMES.index(t) for t in tags] for _, tags in rows],
        },
        features=features,
    )


def _dataset_dict(d, train_rows, **more):
    datasets = pytest.importorskip("datasets")
    dd = datasets.DatasetDict({"train": _dataset(train_rows), **{k: _dataset(v) for k, v in more.items()}})
    dd.save_to_disk(str(d))
    return str(d)


def _parquet(path, tokens, ner_tags=None, metadata=None):
    cols = {"tokens": tokens} | ({} if ner_tags is None else {"ner_tags": ner_tags})
    table = pa.table(cols)
    if metadata:
        table = table.replace_schema_metadata(metadata)
    pq.write_table(table, path)
    return str(path)


def test_a_dataset_gives_the_same_cache_as_the_equivalent_conll_file(teachers, tmp_path):
    """The goal: `--labelled NAME=hf:DIR@SPLIT` builds the cache that the CoNLL file builds. The
    examples and the teacher layer are equal shard by shard, field by field; the manifests differ
    only in each corpus's source and sha256 (a directory of Arrow files is not the CoNLL file)."""
    datasets = pytest.importorskip("datasets")
    crf_dir, _ = teachers
    (tmp_path / "train.txt").write_text(CONLL)
    (tmp_path / "raw.txt").write_text(RAW)
    conll_specs = [
        CorpusSpec("conll", str(tmp_path / "train.txt"), "train", True),
        CorpusSpec("wiki", str(tmp_path / "raw.txt"), "unlabelled", False),
    ]
    from_conll = str(tmp_path / "from-conll")
    build_cache(from_conll, crf_dir, conll_specs, _cfg(), **QUIET)

    rows = _conll_rows(CONLL)
    assert rows[0] == (["-DOCSTART-"], ["O"]) and len(rows) == 5
    hf = _dataset_dict(tmp_path / "conll-hf", rows, validation=rows[1:3])
    raw = datasets.Dataset.from_dict({"tokens": [line.split() for line in RAW.splitlines()]})
    raw.save_to_disk(str(tmp_path / "raw-hf"))  # no ner_tags: unlabelled; its blank line is an empty row
    from_hf = str(tmp_path / "from-hf")
    args = ["build", "--out", from_hf, "--teacher", crf_dir, "--labelled", f"conll=hf:{hf}@train"]
    args += ["--unlabelled", f"wiki=hf:{tmp_path / 'raw-hf'}", "--kbest", "4", "--shard-size", "2"]
    r = CliRunner().invoke(cache_cli, [*args, "--hidden-layers", "1", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    assert verify_cache(from_hf) == []

    _assert_same(_contents(from_hf), _contents(from_conll))
    a, b = CacheReader(from_hf).manifest, CacheReader(from_conll).manifest
    assert a.label_schema == b.label_schema and a.teachers == b.teachers
    for layer in ("examples", "crf"):  # byte for byte: every shard file's sha256 and size
        assert [s.to_json() for s in a.layers[layer].shards] == [s.to_json() for s in b.layers[layer].shards]
    what_differs = {"source", "sha256"}
    for x, y in zip(a.corpora, b.corpora):
        assert {k: v for k, v in x.to_json().items() if k not in what_differs} == {
            k: v for k, v in y.to_json().items() if k not in what_differs
        }
        assert x.sha256 != y.sha256
    assert [c.source for c in a.corpora] == [f"hf:{hf}@train", f"hf:{tmp_path / 'raw-hf'}"]


def test_hf_directories_datasetdict_splits_and_documents(tmp_path):
    rows = _conll_rows(CONLL)
    d = _dataset_dict(tmp_path / "dd", rows, test=rows[3:])
    conll = tmp_path / "train.txt"
    conll.write_text(CONLL)
    want = read_corpus(conll, "c")
    got = read_corpus(f"hf:{d}@train", "c")
    assert [(s.words, s.tags, s.doc_id) for s in got.sentences] == [(s.words, s.tags, s.doc_id) for s in want.sentences]
    assert got.scheme == "IOB2" and got.path == f"hf:{d}@train" and [s.row for s in got.sentences] == [1, 2, 4]
    test = read_corpus(f"hf:{d}@test", "c", "test")
    assert [s.words for s in test.sentences] == [["BRUSSELS", "1996-08-22"]]
    with pytest.raises(
        CorpusError, match=re.escape(f"hf:{d}: a DatasetDict with splits train, test: pick one with hf:{d}@SPLIT")
    ):
        read_corpus(f"hf:{d}", "c")
    with pytest.raises(CorpusError, match=r"no split 'dev': the DatasetDict has train, test"):
        read_corpus(f"hf:{d}@dev", "c")
    single = _dataset_dict(tmp_path / "one", rows)  # a DatasetDict of one split needs no @SPLIT
    assert len(read_corpus(f"hf:{single}", "c").sentences) == 3
    _dataset(rows).save_to_disk(str(tmp_path / "plain"))
    assert read_corpus(f"hf:{tmp_path / 'plain'}@anything", "c").path == f"hf:{tmp_path / 'plain'}@anything"
    assert read_corpus(str(tmp_path / "plain"), "c", format="hf").sentences[0].words == [
        "EU",
        "rejects",
        "German",
        "call",
    ]
    with pytest.raises(CorpusError, match=r"is a directory, not a corpus file \(a datasets save_to_disk directory"):
        read_corpus(str(tmp_path / "plain"), "c")
    with pytest.raises(CorpusError, match=r"hf:.*nope: no such directory"):
        read_corpus(f"hf:{tmp_path / 'nope'}", "c")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match=r"not a datasets save_to_disk directory"):
        read_corpus(f"hf:{tmp_path / 'empty'}", "c")


def test_hf_errors_name_the_dataset_row_and_column(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [(["Ann", "sings"], ["B-PER", "O"])] * 17 + [(["Bob", "x"], ["B-PER", "O"])]
    ds = _dataset(rows, class_label=False)  # ints, no names
    ds.save_to_disk(str(tmp_path / "ids"))
    with pytest.raises(CorpusError, match=r"ids: row 0, column ner_tags: tag ids without names.*pass --tag-names"):
        read_corpus(f"hf:{tmp_path / 'ids'}", "c")
    ok = read_corpus(f"hf:{tmp_path / 'ids'}", "c", tag_names=NAMES)
    assert ok.sentences[0].tags == ["B-PER", "O"]
    bad = ds.map(lambda r, i: {"ner_tags": [12, 0] if i == 17 else r["ner_tags"]}, with_indices=True)
    bad.save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(
        CorpusError,
        match="^" + re.escape(f"hf:{tmp_path / 'bad'}: row 17, column ner_tags: tag id 12 has no name (9 names)") + "$",
    ):
        read_corpus(f"hf:{tmp_path / 'bad'}", "c", tag_names=NAMES)
    # a transition the scheme forbids: row, column and word
    feats = datasets.Features(
        {
            "tokens": datasets.Sequence(datasets.Value("string")),
            "ner_tags": datasets.Sequence(datasets.ClassLabel(names=NAMES)),
        }
    )
    trans = datasets.Dataset.from_dict(
        {"tokens": [["a"], ["b", "c", "d"]], "ner_tags": [[0], [1, 0, 2]]}, features=feats
    )
    trans.save_to_disk(str(tmp_path / "trans"))
    with pytest.raises(CorpusError, match=r"trans: row 1, column ner_tags, word 2: 'O' cannot be followed by 'I-PER'"):
        read_corpus(f"hf:{tmp_path / 'trans'}", "c")
    # ClassLabel names and --tag-names that disagree
    _dataset(rows).save_to_disk(str(tmp_path / "named"))
    with pytest.raises(
        CorpusError, match=r"the ClassLabel feature of column ner_tags names the ids .* but --tag-names"
    ):
        read_corpus(f"hf:{tmp_path / 'named'}", "c", tag_names=list(reversed(NAMES)))
    assert read_corpus(f"hf:{tmp_path / 'named'}", "c", tag_names=NAMES).sentences[0].tags == ["B-PER", "O"]
    notag = datasets.Dataset.from_dict({"tokens": [["a"]], "labels": [[0]]})
    notag.save_to_disk(str(tmp_path / "notag"))
    with pytest.raises(CorpusError, match=r"notag: no column 'ner_tags': the columns are tokens, labels"):
        read_corpus(f"hf:{tmp_path / 'notag'}", "c")
    assert not read_corpus(f"hf:{tmp_path / 'notag'}", "c", labelled=False).labelled
    # a label outside the teacher's schema (after conversion) still names the row
    from seqdistill.cache_schema import LabelSchema

    with pytest.raises(
        CorpusError, match=r"ids: row 0, column ner_tags, word 0: tag 'B-PER' is not in the label schema"
    ):
        ok.check_labels(LabelSchema("IOB2", ("LOC",)))


def test_parquet_files_with_tokens_and_ner_tags(tmp_path):
    p = _parquet(
        tmp_path / "s.parquet",
        [["EU", "rejects"], [], ["-DOCSTART-"], ["Peter"]],
        [["B-ORG", "O"], [], ["O"], ["S-PER"]],
    )
    with pytest.raises(CorpusError, match=r"s.parquet: row 3, column ner_tags, word 0: ill-formed IOB2 tag 'S-PER'"):
        read_corpus(p, "c", scheme="IOB2")
    p = _parquet(
        tmp_path / "s.parquet",
        [["EU", "rejects"], [], ["-DOCSTART-"], ["Peter"]],
        [["B-ORG", "O"], [], ["O"], ["B-PER"]],
    )
    c = read_corpus(p, "c")
    assert [(s.words, s.tags, s.doc_id, s.row) for s in c.sentences] == [
        (["EU", "rejects"], ["B-ORG", "O"], None, 0),
        (["Peter"], ["B-PER"], "1", 3),
    ]
    assert c.notes == ["1 row without tokens skipped"] and c.scheme == "IOB2"
    ids = _parquet(tmp_path / "ids.parquet", [["a", "b"], ["c"]], [[1, 2], [0]])
    with pytest.raises(CorpusError, match=r"ids.parquet: row 0, column ner_tags: tag ids without names.*--tag-names"):
        read_corpus(ids, "c")
    named = read_corpus(ids, "c", tag_names=NAMES)
    assert [s.tags for s in named.sentences] == [["B-PER", "I-PER"], ["O"]]
    assert named.sha256 != read_corpus(ids, "c", tag_names=["O", "B-LOC", "I-LOC"]).sha256  # another naming
    assert read_corpus(p, "c", tag_names=NAMES).sha256 == c.sha256  # tag strings ignore tag_names
    with pytest.raises(CorpusError, match=r"row 1, column ner_tags: tag id 3 has no name \(3 names\)"):
        read_corpus(_parquet(tmp_path / "big.parquet", [["a"], ["b"]], [[0], [3]]), "c", tag_names=["O", "B-X", "I-X"])
    with pytest.raises(CorpusError, match=r"row 1, column ner_tags: tag id -1 has no name"):
        read_corpus(_parquet(tmp_path / "neg.parquet", [["a"], ["b"]], [[0], [-1]]), "c", tag_names=NAMES)
    with pytest.raises(CorpusError, match=r"len.parquet: row 0, column ner_tags: 1 tags for 2 tokens"):
        read_corpus(_parquet(tmp_path / "len.parquet", [["a", "b"]], [["O"]]), "c")
    with pytest.raises(CorpusError, match=r"null.parquet: row 1, column ner_tags: no tags \(null\)"):
        read_corpus(_parquet(tmp_path / "null.parquet", [["a"], ["b"]], [["O"], None]), "c")
    with pytest.raises(CorpusError, match=r"ws.parquet: row 0, column tokens: a token contains whitespace"):
        read_corpus(_parquet(tmp_path / "ws.parquet", [["New York"]], [["B-LOC"]]), "c")
    with pytest.raises(CorpusError, match=r"cols.parquet: no column 'tokens': the columns are words, ner_tags"):
        pq.write_table(pa.table({"words": [["a"]], "ner_tags": [["O"]]}), tmp_path / "cols.parquet")
        read_corpus(tmp_path / "cols.parquet", "c")
    with pytest.raises(CorpusError, match=r"notags.parquet: no column 'ner_tags'.*read it as unlabelled"):
        read_corpus(_parquet(tmp_path / "notags.parquet", [["a"]]), "c")
    assert read_corpus(tmp_path / "notags.parquet", "c", labelled=False).sentences[0].words == ["a"]
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(CorpusError, match=r"junk.parquet: not a Parquet file"):
        read_corpus(tmp_path / "junk.parquet", "c")


def test_parquet_and_jsonl_written_by_datasets(tmp_path):
    rows = _conll_rows(CONLL)
    ds = _dataset(rows)
    ds.to_parquet(str(tmp_path / "d.parquet"))  # the ClassLabel names travel in the file's metadata
    ds.to_json(str(tmp_path / "d.jsonl"))  # {"id": ..., "tokens": [...], "ner_tags": [ids]}: no names
    (tmp_path / "train.txt").write_text(CONLL)
    want = [(s.words, s.tags, s.doc_id) for s in read_corpus(tmp_path / "train.txt", "c").sentences]
    assert [(s.words, s.tags, s.doc_id) for s in read_corpus(tmp_path / "d.parquet", "c").sentences] == want
    with pytest.raises(CorpusError, match=r"d.jsonl:2: column ner_tags: tag ids without names.*--tag-names"):
        read_corpus(tmp_path / "d.jsonl", "c")
    c = read_corpus(tmp_path / "d.jsonl", "c", tag_names=NAMES)
    assert [(s.words, s.tags, s.doc_id) for s in c.sentences] == want and c.sentences[0].line == 2


def test_jsonl_tokens_and_ner_tags_lines(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(
        json.dumps({"tokens": ["Ann", "sings"], "ner_tags": ["B-PER", "O"]})
        + "\n"
        + json.dumps({"tokens": ["Bob"], "ner_tags": ["B-PER"], "doc_id": 3})
        + "\n"
    )
    c = read_corpus(p, "c")
    assert [(s.words, s.tags, s.doc_id) for s in c.sentences] == [
        (["Ann", "sings"], ["B-PER", "O"], None),
        (["Bob"], ["B-PER"], "3"),
    ]
    p.write_text(json.dumps({"tokens": ["a", "b"], "ner_tags": [0, 7]}) + "\n")
    with pytest.raises(CorpusError, match=r"t.jsonl:1: column ner_tags: tag id 7 has no name \(3 names\)"):
        read_corpus(p, "c", tag_names=["O", "B-X", "I-X"])
    p.write_text(json.dumps({"tokens": ["a"], "tags": ["O"]}) + "\n")
    with pytest.raises(CorpusError, match=r"t.jsonl:1: give 'words'/'tags' or 'tokens'/'ner_tags', not 'tags'"):
        read_corpus(p, "c")
    p.write_text(json.dumps({"tokens": ["a"], "ner_tags": [0.5]}) + "\n")
    with pytest.raises(CorpusError, match=r"t.jsonl:1: column ner_tags: expected a list of tag ids .* found 0.5"):
        read_corpus(p, "c")
    p.write_text(json.dumps({"tokens": ["a"]}) + "\n")  # no ner_tags: an unlabelled corpus, as without "tags"
    assert not read_corpus(p, "c").labelled


def test_datasets_is_imported_only_for_hf_corpora(tmp_path):
    p = _parquet(tmp_path / "s.parquet", [["a"]], [["O"]])
    code = (
        "import sys\n"
        "from seqdistill.cli.cache import main\n"
        "from seqdistill.corpora import read_corpus\n"
        f"read_corpus({p!r}, 'c')\n"
        "assert 'datasets' not in sys.modules, 'datasets imported'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_check_corpus_command_on_datasets(tmp_path):
    rows = _conll_rows(CONLL)
    d = _dataset_dict(tmp_path / "dd", rows, validation=rows[1:3])
    r = CliRunner().invoke(cache_cli, ["check-corpus", f"hf:{d}@validation"])
    assert r.exit_code == 0, r.output
    assert (
        f"hf:{d}@validation: 2 sentences, 6 words" in r.output
        and "scheme IOB2, entity types: MISC, ORG, PER" in r.output
    )
    r = CliRunner().invoke(cache_cli, ["check-corpus", f"hf:{d}"])
    assert r.exit_code == 1 and "pick one with" in r.output
    ids = _parquet(tmp_path / "ids.parquet", [["a", "b"], []], [[1, 2], []])
    r = CliRunner().invoke(cache_cli, ["check-corpus", ids])
    assert r.exit_code == 1 and "row 0, column ner_tags: tag ids without names" in r.output
    r = CliRunner().invoke(cache_cli, ["check-corpus", ids, "--tag-names", ",".join(NAMES)])
    assert r.exit_code == 0, r.output
    assert "1 sentences, 2 words" in r.output and "1 row without tokens skipped" in r.output and "PER" in r.output
    r = CliRunner().invoke(cache_cli, ["check-corpus", ids, "--tag-names", "O,,B-X"])
    assert r.exit_code == 2 and "expected comma-separated tag names" in r.output


def test_distill_eval_data_scores_a_dataset_as_its_conll_file(teachers, tmp_path):
    crf_dir, _ = teachers
    (tmp_path / "test.txt").write_text(CONLL)
    rows = _conll_rows(CONLL)
    _dataset(rows, class_label=False).save_to_disk(str(tmp_path / "ids"))
    runner = CliRunner()
    base = ["--model", crf_dir, "--no-latency", "--json", "--device", "cpu"]
    want = runner.invoke(eval_main, [*base, "--data", str(tmp_path / "test.txt")])
    assert want.exit_code == 0, want.output
    r = runner.invoke(eval_main, [*base, "--data", f"hf:{tmp_path / 'ids'}"])
    assert r.exit_code == 1 and "tag ids without names" in r.output and "--tag-names" in r.output
    got = runner.invoke(eval_main, [*base, "--data", f"hf:{tmp_path / 'ids'}", "--tag-names", ",".join(NAMES)])
    assert got.exit_code == 0, got.output
    (a,), (b,) = json.loads(got.stdout), json.loads(want.stdout)
    for k in ("precision", "recall", "f1", "macro_f1", "per_type", "exact_match"):
        assert a[k] == b[k], k


def test_finetune_teacher_reads_datasets(tiny_encoder, tmp_path):
    import random

    rng = random.Random(0)
    rows = []
    for _ in range(16):
        rows.append(([rng.choice(["peter", "anna"]), "visits", rng.choice(["paris", "rome"])], ["B-PER", "O", "B-LOC"]))
    d = _dataset_dict(tmp_path / "toy", rows[:12], validation=rows[12:14], test=rows[14:])
    dev = _parquet(
        tmp_path / "dev.parquet", [w for w, _ in rows[12:]], [[NAMES.index(t) for t in tags] for _, tags in rows[12:]]
    )
    args = ["finetune-teacher", "--encoder", tiny_encoder, "--train", f"hf:{d}@train", "--dev", dev]
    args += ["--test", f"hf:{d}@test", "--out", str(tmp_path / "teacher"), "--epochs", "1", "--device", "cpu"]
    r = CliRunner().invoke(cache_cli, [*args, "--batch-size", "8"])
    assert r.exit_code == 1 and "dev.parquet: row 0, column ner_tags: tag ids without names" in r.output
    r = CliRunner().invoke(cache_cli, [*args, "--batch-size", "8", "--tag-names", ",".join(NAMES)])
    assert r.exit_code == 0, r.output
    assert "label schema: IOB2 over LOC, PER; 12 training sentences" in r.output
    summary = json.loads((tmp_path / "teacher" / "training.json").read_text())
    assert "f1" in summary["test"]


def test_hf_without_datasets_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    with pytest.raises(CorpusError, match=r"needs the datasets package: pip install 'seqdistill\[datasets\]'"):
        read_corpus(f"hf:{tmp_path}", "c")
