"""XtremeDistil (paper 001): losses by hand, the unfreezing schedule, best-weight restoring, and a
student trained stage-wise from a cache whose teacher is gone."""

import json
import math

import pytest
import torch
from click.testing import CliRunner
from conftest import toy_cache

from seqdistill.cache_schema import LabelSchema
from seqdistill.students import losses as L
from seqdistill.students.archs import load_student
from seqdistill.students.archs.bilstm_tagger import GROUPS, BiLSTMTagger, TaggerConfig
from seqdistill.students.common import predict_tags
from seqdistill.students.recipes import train
from seqdistill.students.recipes import xtremedistil as XD
from seqdistill.tokenization import words_to_subwords

SCHEMA = LabelSchema("IOB2", ("LOC", "PER"))


@pytest.fixture(scope="module")
def cache(tiny_encoder, tmp_path_factory):
    return toy_cache(tiny_encoder, tmp_path_factory.mktemp("xd"), k=2, hidden_layers=(1,), shard_size=32)


def test_cross_entropy_by_hand():
    logits = torch.tensor([[[2.0, 0.0], [0.0, 1.0], [5.0, 5.0]]])
    tags = torch.tensor([[0, 0, -1]])  # the third word has no label
    mask = torch.tensor([[True, True, True]])
    expected = -(math.log(math.exp(2) / (math.exp(2) + 1)) + math.log(1 / (1 + math.e)))
    assert L.cross_entropy_loss(logits, tags, mask).item() == pytest.approx(expected, rel=1e-6)


def test_logit_loss_by_hand():
    r = torch.tensor([[[1.0, 2.0], [0.0, 0.0]]])
    t = torch.tensor([[[0.0, 4.0], [9.0, 9.0]]])
    mask = torch.tensor([[True, False]])  # padding does not count
    assert L.logit_loss(r, t, mask).item() == pytest.approx(0.5 * (1 + 4))


def test_representation_loss_by_hand():
    zs = torch.tensor([[[0.0, 0.0]]])  # softmax (1/2, 1/2)
    zt = torch.tensor([[[math.log(3.0), 0.0]]])  # softmax (3/4, 1/4)
    expected = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
    assert L.representation_loss(zs, zt, torch.tensor([[True]])).item() == pytest.approx(expected, rel=1e-6)
    assert L.representation_loss(zt, zt, torch.tensor([[True]])).item() == pytest.approx(0.0, abs=1e-7)


def _model(hidden=4, vocab=50, pooling="first"):
    cfg = TaggerConfig(
        SCHEMA.to_json(),
        vocab,
        6,
        "random",
        False,
        hidden,
        1,
        0.0,
        arch="bilstm-tagger",
        projection_dim=7,
        pooling=pooling,
    )
    return BiLSTMTagger(cfg)


def test_gradual_unfreezing_follows_algorithm_1_top_down():
    stages, gradual = XD.SCHEDULES["d4.2"]
    plan = [g for losses in stages for g in XD.unfreezing_steps(losses, gradual)]
    assert plan == [
        ("projection",),
        ("projection", "bilstm"),
        ("projection", "bilstm", "embeddings"),
        ("regressor",),
        ("regressor", "projection"),
        ("regressor", "projection", "bilstm"),
        ("regressor", "projection", "bilstm", "embeddings"),
        ("softmax",),
        ("softmax", "projection"),
        ("softmax", "projection", "bilstm"),
        ("softmax", "projection", "bilstm", "embeddings"),
    ]
    assert XD.unfreezing_steps(("ll", "ce"), False) == [("softmax", "regressor", "projection", "bilstm", "embeddings")]
    model = _model()
    by_group = model.groups()
    for groups in plan:
        trainable = XD.set_trainable(model, groups)
        for name in GROUPS:
            assert all(p.requires_grad == (name in groups) for p in by_group[name]), (groups, name)
        assert {id(p) for p in trainable} == {id(p) for g in groups for p in by_group[g]}
    with pytest.raises(ValueError, match="unknown parameter groups"):
        XD.set_trainable(model, ("crf",))


def test_mean_and_first_pooling(tiny_encoder):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_encoder)
    x = words_to_subwords(tok, [["anna", "xq"], ["the"]])  # "xq" is two subwords: x ##q
    assert x.first.tolist() == [[0, 1], [0, 0]] and x.word_ids.tolist() == [[0, 1, 1], [0, -1, -1]]
    h = torch.arange(2 * 3 * 1, dtype=torch.float).view(2, 3, 1)
    first, mean = _model(), _model(pooling="mean")
    assert first.pool(h, x)[0, :, 0].tolist() == [0.0, 1.0]
    assert mean.pool(h, x)[0, :, 0].tolist() == [0.0, 1.5]


def test_cosine_schedule_from_high_to_low():
    assert XD.cosine_lr(0, 10, 1e-3, 1e-8) == pytest.approx(1e-3)
    assert XD.cosine_lr(5, 10, 1e-3, 1e-8) == pytest.approx((1e-3 + 1e-8) / 2)
    assert XD.cosine_lr(10, 10, 1e-3, 1e-8) == XD.cosine_lr(99, 10, 1e-3, 1e-8) == pytest.approx(1e-8)


def test_xtremedistil_d4_student_learns_from_the_cache(cache, tmp_path):
    from seqdistill.cli.train import main as train_cli

    r = CliRunner().invoke(
        train_cli,
        [
            "--cache",
            cache,
            "--out",
            str(tmp_path / "xd"),
            "--recipe",
            "xtremedistil",
            "--schedule",
            "d4",
            "--teacher-layer",
            "1",
            "--embedding-dim",
            "8",
            "--hidden-size",
            "12",
            "--batch-size",
            "16",
            "--epochs-per-step",
            "3",
            "--lr",
            "0.02",
            "--dropout",
            "0.0",
            "--device",
            "cpu",
        ],
    )
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "xd" / "training.json").read_text())
    steps = [(h["stage"], h["groups"][-1]) for h in summary["stages"]]  # one record per unfreezing step
    assert steps[0] == (1, "projection") and steps[3] == (2, "regressor") and steps[-1] == (3, "embeddings")
    assert len(steps) == 11
    assert summary["best_dev_f1"] > 0.9
    model, tok = load_student(tmp_path / "xd")
    assert model.config.arch == "bilstm-tagger" and model.config.projection_dim == 32  # the teacher's width
    assert predict_tags(model, tok, [["anna", "visits", "the", "rome"]]) == [["B-PER", "O", "O", "B-LOC"]]
    # distill-eval and distill-predict take it like any model directory: no cache, no teacher
    from seqdistill.cli.evaluate import eval_main, predict_main

    (tmp_path / "test.txt").write_text("peter B-PER\nvisits O\nparis B-LOC\n\nanna B-PER\nvisits O\nrome B-LOC\n")
    r = CliRunner().invoke(eval_main, ["--model", str(tmp_path / "xd"), "--data", str(tmp_path / "test.txt"), "--json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.output)[0]
    assert row["kind"] == "student" and row["f1"] == 1.0 and row["ms_per_sentence_batch32"] > 0
    (tmp_path / "raw.txt").write_text("anna visits paris\n")
    r = CliRunner().invoke(
        predict_main,
        [
            "--model",
            str(tmp_path / "xd"),
            "--input",
            str(tmp_path / "raw.txt"),
            "--output",
            str(tmp_path / "out.jsonl"),
            "--output-format",
            "jsonl",
        ],
    )
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "out.jsonl").read_text())["tags"] == ["B-PER", "O", "B-LOC"]


def test_select_dev_f1_keeps_the_best_dev_f1_epoch_of_label_steps_only(cache, tmp_path):
    """--select dev-f1: the CE stage keeps (and stops on) its best dev F1 epoch; RL and LL stages
    still keep their lowest validation loss. The default keeps the validation loss everywhere."""
    opts = dict(schedule="d4.1", teacher_layer=1, embedding_dim=8, hidden_size=8, batch_size=16, device="cpu")
    opts.update(epochs_per_step=3, patience=3, lr=0.02)
    for select in ("dev-f1", "val-loss"):
        out = tmp_path / select
        summary = train(cache, out, XD.XtremeDistilConfig(select=select, **opts), log=lambda *a: None)
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        kept = {r["stage"]: r for r in summary["stages"]}  # the record each stage kept
        for s in (1, 2, 3):
            mine = [r for r in records if r["stage"] == s]
            assert len(mine) == 3
            metric = "dev_f1" if (select, s) == ("dev-f1", 3) else "val_loss"
            assert {r["selected_on"] for r in mine} == {metric}
            if metric == "dev_f1":
                assert kept[s]["dev_f1"] >= max(r["dev_f1"] for r in mine)
            else:
                assert kept[s]["val_loss"] <= min(r["val_loss"] for r in mine)


def test_missing_teacher_layer_lists_the_stored_ones(cache, tmp_path):
    with pytest.raises(Exception, match=r"no hidden layer 5 in the cache; stored layers: 1"):
        train(cache, tmp_path / "x", XD.XtremeDistilConfig(teacher_layer=5, device="cpu"), log=lambda *a: None)
    with pytest.raises(Exception, match=r"unknown schedule 'd9'"):
        train(cache, tmp_path / "x", XD.XtremeDistilConfig(schedule="d9"), log=lambda *a: None)


def test_unlabelled_sample_applies_to_the_training_rows_only(cache, tmp_path):
    """--unlabelled-sentences samples the rows of the distillation stages; the CE stage and the
    dev stream (no unlabelled corpora) are unaffected, and the schedule counts the sample."""
    from seqdistill.cli.train import main as train_cli

    args = [
        "--cache",
        cache,
        "--recipe",
        "xtremedistil",
        "--schedule",
        "d4.1",
        "--teacher-layer",
        "1",
        "--embedding-dim",
        "8",
        "--hidden-size",
        "8",
        "--batch-size",
        "16",
        "--epochs-per-step",
        "1",
        "--device",
        "cpu",
    ]
    r = CliRunner().invoke(train_cli, [*args, "--out", str(tmp_path / "a"), "--unlabelled-sentences", "5"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(train_cli, [*args, "--out", str(tmp_path / "b"), "--unlabelled-sentences", "999"])
    assert r.exit_code == 1 and "--unlabelled-sentences 999: the training selection holds" in r.output


def test_xtremedistil_resumes_bit_identical_and_trains_under_torchrun(cache, tmp_path):
    """Killed in stage 2 (d3.1: RL, then LL + CE), mid-epoch; each stage restores its best weights."""
    from conftest import resumes_and_runs_under_torchrun

    resumes_and_runs_under_torchrun(
        "xtremedistil",
        cache,
        {
            "schedule": "d3.1",
            "teacher-layer": 1,
            "embedding-dim": 8,
            "hidden-size": 8,
            "batch-size": 16,
            "epochs-per-step": 2,
            "patience": 5,
            "checkpoint-every": 4,
        },
        tmp_path,
        kill_at=17,
    )


def test_hidden_norm_standardize_gives_each_dimension_unit_variance(cache, tmp_path):
    """--hidden-norm standardize: each dimension's mean and std over the first shard (read back here
    with zarr alone), and the collated RL targets (x - mean) / std, by hand."""
    from pathlib import Path

    import numpy as np
    import zarr
    from transformers import AutoTokenizer

    from seqdistill.cache_schema import EXAMPLES_LAYER, CacheReader

    reader = CacheReader(cache)
    mean, std = XD.dimension_stats(reader, "tiny", "hidden_1", None)
    stored = np.asarray(zarr.open_array(str(Path(cache) / "layers/tiny/shard-00000/dense.zarr/hidden_1"), mode="r")[:])
    np.testing.assert_allclose(mean, stored.astype(np.float64).mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(std, stored.astype(np.float64).std(0), rtol=1e-5, atol=1e-6)
    rows = reader.read_shard(0, {EXAMPLES_LAYER: ["words", "tags"], "tiny": ["hidden_1"]}).rows([0, 1])
    tokenizer = AutoTokenizer.from_pretrained(reader.export_dir("tiny", tmp_path / "exports") + "/tokenizer")
    batch = XD.Collate(tokenizer, SCHEMA, "tiny", None, "hidden_1", None, (mean, std))(rows)
    first = rows[0]["tiny"]["hidden_1"]
    want = (first[1] - mean) / std  # the first sentence's second word, by hand
    np.testing.assert_allclose(batch.teacher_hidden[0, 1].numpy(), want, rtol=1e-5, atol=1e-6)
    plain = XD.Collate(tokenizer, SCHEMA, "tiny", None, "hidden_1")(rows)
    assert not torch.allclose(plain.teacher_hidden, batch.teacher_hidden)
    # a run with it says so where it starts, and keeps the setting in its config for a resume
    lines = []
    cfg = XD.XtremeDistilConfig(
        schedule="d2",
        hidden_norm="standardize",
        embedding_dim=8,
        hidden_size=8,
        epochs_per_step=1,
        batch_size=16,
        device="cpu",
    )
    train(cache, tmp_path / "std", cfg, log=lines.append)
    assert any("teacher layer hidden_1 (each dimension standardised)" in str(line) for line in lines)
    assert 'hidden-norm = "standardize"' in (tmp_path / "std" / "config.toml").read_text()
