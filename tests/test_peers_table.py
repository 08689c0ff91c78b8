"""benchmarks/peers.py's seed table: means over seeds and differences paired by seed, by hand."""

import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from peers import seed_means  # noqa: E402


def test_seed_means_and_paired_differences_match_a_hand_computation():
    f1 = {
        "vanilla (seed 13)": 80.0,
        "vanilla (seed 14)": 82.0,
        "vanilla (seed 15)": 81.0,
        "default (seed 13)": 90.0,
        "default (seed 14)": 91.0,
        "default (seed 15)": 90.5,
        "te (seed 13)": 88.0,  # one seed: no group of its own
        "teacher, ONNX int8": 91.0,
    }
    lines = seed_means(f1, reference="vanilla")
    rows = {
        line.split(" | ")[0].lstrip("| "): line
        for line in lines
        if line.startswith("| ") and not line.startswith("| model")
    }
    assert set(rows) == {"vanilla", "default"}
    diffs = [10.0, 9.0, 9.5]
    assert (
        f"| 90.50 ± 0.50 | +{statistics.mean(diffs):.2f} ± {statistics.stdev(diffs):.2f} (3 seeds) |" in rows["default"]
    )
    assert rows["vanilla"].endswith("| 81.00 ± 1.00 | |")
    assert seed_means({"a (seed 1)": 1.0}) == []
    with pytest.raises(SystemExit, match="--reference 'te': no group of two or more seeds"):
        seed_means(f1, reference="te")


def test_a_reference_without_seeds_is_refused_before_any_model_is_trained_or_timed(tmp_path, monkeypatch):
    import peers

    for name in ("train.txt", "dev.txt", "test.txt"):
        (tmp_path / name).write_text("EU B-ORG\n")
    students = []
    for name in ("default (seed 13)", "glove (seed 13)", "glove (seed 14)"):
        d = tmp_path / name.replace(" ", "_")
        d.mkdir()
        students += ["--student", f"{name}={d}"]
    monkeypatch.setattr(peers, "compare", lambda *a, **k: pytest.fail("compare ran"))
    argv = ["peers.py", "--train", str(tmp_path / "train.txt"), "--dev", str(tmp_path / "dev.txt")]
    argv += ["--test", str(tmp_path / "test.txt"), "--teacher", str(tmp_path), *students]
    monkeypatch.setattr(sys, "argv", [*argv, "--reference", "default"])
    with pytest.raises(SystemExit, match="--reference 'default': no group of two or more seeds .*have: glove"):
        peers.main()
    # spaCy's seeds are a group of their own (--spacy-seeds): a reference to them passes the check
    monkeypatch.setattr(sys, "argv", [*argv, "--spacy-seeds", "1,2", "--reference", "spaCy NER, gold"])
    with pytest.raises(pytest.fail.Exception, match="compare ran"):
        peers.main()


def test_spacy_parameters_split_at_its_hash_embedding_tables():
    """--wide's spaCy counts (issue 82): every thinc parameter of the stock NER, and those outside its
    HashEmbed tables, whose rows are nV x nO each."""
    spacy = pytest.importorskip("spacy")
    import peers
    from spacy.training import Example

    nlp = spacy.blank("en")
    nlp.add_pipe("ner")
    doc = nlp.make_doc("Peter visits Paris")
    nlp.initialize(lambda: [Example.from_dict(doc, {"entities": [(0, 5, "PER"), (13, 18, "LOC")]})])
    model = peers.SpacyModel.__new__(peers.SpacyModel)
    model.nlp = nlp
    total, without = model.parameters()
    nodes = [n for _, pipe in nlp.pipeline for n in pipe.model.walk()]
    tables = [n for n in nodes if n.name.startswith("hashembed")]
    assert len(tables) >= 4  # NORM, PREFIX, SUFFIX, SHAPE in the stock tok2vec
    assert total - without == sum(n.get_dim("nV") * n.get_dim("nO") for n in tables)
    assert total == sum(n.get_param(p).size for n in nodes for p in n.param_names if n.has_param(p))
    assert 0 < without < total


def test_speed_only_networks_reach_compare_apart_from_the_scored_students(tmp_path, monkeypatch, capsys):
    """--speed-only NAME=DIR (issue 82): passed to compare as a network timed, not scored; a missing
    directory is refused by the option's name before anything runs."""
    import peers

    for name in ("train.txt", "dev.txt", "test.txt"):
        (tmp_path / name).write_text("EU B-ORG\n")
    (tmp_path / "student").mkdir()
    (tmp_path / "shape").mkdir()
    argv = ["peers.py", "--train", str(tmp_path / "train.txt"), "--dev", str(tmp_path / "dev.txt")]
    argv += ["--test", str(tmp_path / "test.txt"), "--teacher", str(tmp_path)]
    argv += ["--student", f"rnn={tmp_path / 'student'}"]
    seen = {}

    def compare(paths, students, work, **kw):
        seen.update(students=students, speed=kw["speed_students"])
        return {}, ""

    monkeypatch.setattr(peers, "compare", compare)
    monkeypatch.setattr(sys, "argv", [*argv, "--speed-only", f"mgkd network={tmp_path / 'shape'}"])
    peers.main()
    assert seen == {"students": {"rnn": str(tmp_path / "student")}, "speed": {"mgkd network": str(tmp_path / "shape")}}
    monkeypatch.setattr(sys, "argv", [*argv, "--speed-only", f"mgkd={tmp_path / 'missing'}"])
    with pytest.raises(SystemExit):
        peers.main()
    assert "--speed-only mgkd=" in capsys.readouterr().err
