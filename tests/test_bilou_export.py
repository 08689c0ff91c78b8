"""An export of a per-type (BILOU) student whose heads do not match its entity types is refused by
name before anything is written (issue 82)."""

import json

import pytest
from test_export import make_student

from seqdistill.deploy.export import export_model
from seqdistill.inference import ExportError, Tagger


@pytest.mark.parametrize(
    "types, message",
    [
        (["LOC", "LOC"], r"entity type 'LOC' has two BILOU heads"),
        (["LOC", "ORG"], r"the BILOU heads' types 'ORG' are not types of the model's label schema \(LOC, PER\)"),
    ],
)
def test_a_bilou_student_whose_heads_and_types_differ_is_not_exported(tiny_encoder, tmp_path, types, message):
    student = make_student(tiny_encoder, tmp_path / "s", "rnn-tagger", extra={"cell": "sru"})
    out = export_model(student, tmp_path / "good")  # as saved: exported, and its spans are the torch model's
    sentence = [["peter", "visits", "paris"]]
    assert Tagger.load(out).predict_spans(sentence) == Tagger.load(student).predict_spans(sentence)
    config = json.loads((student / "config.json").read_text())
    config["extra"]["entity_types"] = types  # a hand edit: the heads' weights stay as they were
    (student / "config.json").write_text(json.dumps(config))
    with pytest.raises(ExportError, match=message):
        export_model(student, tmp_path / "bad")
    assert not (tmp_path / "bad").exists() and not list(tmp_path.glob(".bad.*"))
