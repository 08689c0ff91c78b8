"""Model cards (issue 21, item 3): written by `distill-eval --card` from the measured figures and
the student's provenance, for a student and its exported directory; readable as a Hub card."""

import json

import pytest
from click.testing import CliRunner
from conftest import toy_cache, toy_corpus

from seqdistill.cache_schema import CacheReader
from seqdistill.cli.evaluate import eval_main
from seqdistill.deploy.card import MARK, read_card
from seqdistill.students.recipes import train
from seqdistill.students.recipes.mgkd import MGKDConfig


@pytest.fixture(scope="module")
def student(tiny_encoder, tmp_path_factory):
    d = tmp_path_factory.mktemp("card")
    cache = toy_cache(tiny_encoder, d, k=2, shard_size=16)
    cfg = MGKDConfig(losses=("hard",), epochs=2, embedding="random", embedding_dim=8, hidden_size=8, device="cpu")
    train(cache, d / "s", cfg, log=lambda *a: None)
    return cache, d / "s"


def test_card_holds_the_measured_figures_and_the_provenance(student, tmp_path):
    from seqdistill.deploy.export import export_model

    cache, s = student
    onnx = export_model(s, tmp_path / "onnx", quantize="int8")
    test = toy_corpus(tmp_path / "test.txt", 12, 5)
    r = CliRunner().invoke(eval_main, ["--model", str(s), "--model", str(onnx), "--data", test, "--card", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    manifest = CacheReader(cache).manifest
    for d, row in zip((s, onnx), rows):
        card = read_card(d)
        assert card is not None and card["kind"] == "student" and card["recipe"] == "mgkd"
        assert card["test"]["f1"] == row["f1"] and card["test"]["per_type_f1"] == {
            t: v["f1"] for t, v in row["per_type"].items()
        }
        assert card["parameters"]["all"] == row["params"]
        assert card["latency_ms_per_sentence"]["batch1"] == row["ms_per_sentence_batch1"]
        assert card["machine"]["cores"] and card["machine"]["threads"] == 1
        prov = card["provenance"]
        assert prov["teachers"]["tiny"]["fingerprints"] == manifest.teachers["tiny"].fingerprints
        assert {(c["corpus"], c["split"], c["sentences"]) for c in prov["corpora"]} == {
            (c.name, c.split, c.examples) for c in manifest.corpora if c.split in ("train", "dev", "unlabelled")
        }
        text = (d / "README.md").read_text()
        assert f"| test F1 (micro) | {100 * row['f1']:.2f}" in text and "| teacher layer | tiny |" in text
        # the size honestly: every file (its embedding rows and tokenizer), and the rows it holds
        shipped = [p for p in d.rglob("*") if p.is_file() and p.name != "README.md" and "checkpoint" not in p.parts]
        assert card["bytes"] == row["bytes"] == sum(p.stat().st_size for p in shipped)
        assert card["embedding_rows"] == row["embedding_rows"] == 88
        assert "| vocabulary | 88 embedding rows: every subword of the teacher's vocabulary |" in text
        assert f"| size on disk | {row['bytes'] / 2**20:,.1f} MB, every file |" in text
    assert read_card(onnx)["runtime"] == "onnx int8" and read_card(onnx)["quantize"] == "int8"
    # a Hub model card: YAML front matter the huggingface_hub parser reads
    from huggingface_hub import ModelCard

    hub = ModelCard.load(s / "README.md")
    assert hub.data.library_name == "seqdistill" and hub.data.to_dict()["seqdistill"]["recipe"] == "mgkd"


def test_card_refreshes_its_own_readme_and_never_replaces_another(student, tmp_path):
    _, s = student
    test = toy_corpus(tmp_path / "test.txt", 6, 7)
    r = CliRunner().invoke(eval_main, ["--model", str(s), "--data", test, "--card", "--no-latency"])
    assert r.exit_code == 0, r.output
    first = (s / "README.md").read_text()
    assert MARK in first and read_card(s)["latency_ms_per_sentence"]["batch1"] is None
    (s / "README.md").write_text("# my own notes\n")
    r = CliRunner().invoke(eval_main, ["--model", str(s), "--data", test, "--card", "--no-latency"])
    assert r.exit_code == 1 and "a README.md that distill-eval did not write" in r.output
    assert (s / "README.md").read_text() == "# my own notes\n"
    (s / "README.md").unlink()
