"""The teacher with one BILOU head per entity type (paper 003): loss, decoding, fine-tuning, build."""

import pytest
import torch
from conftest import toy_corpus

from seqdistill.bilou import BILOU_TAGS, layers_from_spans
from seqdistill.cache_schema import CacheReader, LabelSchema, verify_cache
from seqdistill.corpora import read_corpus
from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
from seqdistill.teachers import build_teacher, load_teacher
from seqdistill.teachers.finetune import FinetuneConfig, finetune

SCHEMA = LabelSchema("IOB2", ("LOC", "PER"))


def test_loss_is_the_per_type_cross_entropy(tiny_encoder):
    t = build_teacher(tiny_encoder, SCHEMA, "bilou-per-type").eval()
    words = [["peter", "visits", "paris"], ["anna", "visits"]]
    tags = torch.tensor([SCHEMA.encode(["B-PER", "O", "B-LOC"]), SCHEMA.encode(["B-PER", "O"]) + [-1]])
    layers = t.layer_targets(tags)
    assert [[BILOU_TAGS[x] for x in row] for row in layers[0].tolist()] == [["O", "U"], ["O", "O"], ["U", "O"]]
    assert (layers[1, 2] == -1).all()
    with torch.no_grad():
        logits = t.encode(words).logits  # [B, W, E, 5]
        want = (
            sum(
                torch.nn.functional.cross_entropy(logits[b, i, e], layers[b, i, e], reduction="sum")
                for b, n in enumerate([3, 2])
                for i in range(n)
                for e in range(2)
            )
            / 5
        )
        assert t.loss(words, tags).item() == pytest.approx(want.item(), rel=1e-6)
        nested = torch.tensor([layers_from_spans([(0, 3, "LOC"), (0, 1, "PER")], 3, ["LOC", "PER"])])
        assert torch.isfinite(t.loss(words[:1], nested))  # nested entities: a LOC over a PER


def test_finetunes_decodes_to_the_schema_and_builds_a_cache(tiny_encoder, tmp_path):
    train = read_corpus(toy_corpus(tmp_path / "train.txt", 60, 0), "toy", "train").sentences
    dev = read_corpus(toy_corpus(tmp_path / "dev.txt", 16, 1), "toy", "dev").sentences
    summary = finetune(
        tiny_encoder,
        train,
        dev,
        SCHEMA,
        tmp_path / "t",
        FinetuneConfig(head="bilou-per-type", epochs=4, batch_size=8, lr=1e-3, head_lr=1e-2),
        device="cpu",
        log=lambda *a: None,
    )
    assert summary["best_dev_f1"] > 0.5  # names and cities
    teacher = load_teacher(tmp_path / "t")
    assert teacher.kind == "bilou-per-type"
    pred = teacher.predict([["peter", "visits", "rome"]])
    assert all(tag in SCHEMA.tags for tag in pred[0])
    specs = [
        CorpusSpec("toy", str(tmp_path / "train.txt"), "train", True),
        CorpusSpec("raw", toy_corpus(tmp_path / "raw.txt", 8, 2, labelled=False), "unlabelled", False),
    ]
    build_cache(str(tmp_path / "cache"), str(tmp_path / "t"), specs, BuildConfig(device="cpu"), log=lambda *a: None)
    assert verify_cache(str(tmp_path / "cache")) == []
    reader = CacheReader(str(tmp_path / "cache"))
    shard = reader.read_shard(0, {"t": ["type_logits", "gold_nll"]})
    logits = shard.get("t", "type_logits")[0]
    assert logits.shape[1:] == (2, 5)
    nll = [v for v in shard.get("t", "gold_nll").to_pylist() if v is not None]
    assert len(nll) == 60 and all(v > 0 for v in nll)  # the 60 labelled rows; the raw ones have none


@pytest.mark.parametrize("distill", [True, False])
def test_rnn_student_learns_from_a_bilou_teacher_cache(tiny_encoder, tmp_path, distill):
    from click.testing import CliRunner

    from seqdistill.cli.train import main as train_cli
    from seqdistill.students.archs import load_student

    d = tmp_path
    build_teacher(tiny_encoder, SCHEMA, "bilou-per-type").save(d / "t")
    specs = [
        CorpusSpec("toy", toy_corpus(d / "train.txt", 60, 0), "train", True),
        CorpusSpec("toy", toy_corpus(d / "dev.txt", 16, 1), "dev", True),
        CorpusSpec("raw", toy_corpus(d / "raw.txt", 20, 2, labelled=False), "unlabelled", False),
    ]
    build_cache(str(d / "cache"), str(d / "t"), specs, BuildConfig(device="cpu"), log=lambda *a: None)
    args = [
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
        "2",
        "--epochs",
        "12",
        "--patience",
        "12",
        "--lr",
        "3e-3",
        "--batch-size",
        "8",
        "--few-shot-types",
        "LOC",
        "--device",
        "cpu",
        "--distill" if distill else "--no-distill",
    ]
    r = CliRunner().invoke(train_cli, args)
    assert r.exit_code == 0, (r.output, r.exception)
    import json

    summary = json.loads((d / "s" / "training.json").read_text())
    stages = [h["stage"] for h in summary["history"]]
    assert stages[0] == ("distil" if distill else "fine-tune") and stages[-1] == "fine-tune"
    assert {"dev_main_macro_f1", "dev_few_shot_macro_f1"} <= set(summary["history"][-1])
    assert summary["best_dev_macro_f1"] > 0.5  # names and cities
    student, tok = load_student(d / "s")
    assert student.config.arch == "rnn-tagger" and student.parameter_counts()["without_embeddings"] > 0
    r = CliRunner().invoke(train_cli, [*args[:4], "--recipe", "rnn", "--few-shot-types", "MISC", "--device", "cpu"])
    assert r.exit_code == 1 and "MISC" in r.output
    r = CliRunner().invoke(train_cli, [*args[:4], "--recipe", "rnn", "--projection", "3", "--device", "cpu"])
    assert r.exit_code == 1 and "--projection 3" in r.output
    if distill:  # both stages: killed in stage 2, resumed; and under torchrun
        from conftest import resumes_and_runs_under_torchrun

        resumes_and_runs_under_torchrun(
            "rnn",
            str(d / "cache"),
            {
                "cell": "sru",
                "rnn-layers": 1,
                "distill-epochs": 2,
                "epochs": 2,
                "patience": 5,
                "batch-size": 8,
                "checkpoint-every": 4,
            },
            d / "runs",
            kill_at=27,
        )
