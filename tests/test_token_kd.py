"""The token-kd recipe (issue 20's worked example): its loss by hand, a student that learns from a
cache, resume and torchrun."""

import json
import math

import pytest
import torch
from click.testing import CliRunner
from conftest import resumes_and_runs_under_torchrun, toy_cache

from seqdistill.students.losses import teacher_probs, token_kd_loss


@pytest.fixture(scope="module")
def cache(tiny_encoder, tmp_path_factory):
    return toy_cache(tiny_encoder, tmp_path_factory.mktemp("tokenkd"), k=2, shard_size=16)


def test_token_kd_loss_by_hand():
    logits = torch.tensor([[[1.0, 0.0], [0.0, 2.0]], [[0.5, 0.5], [3.0, 3.0]]])
    p_t = torch.tensor([[[0.8, 0.2], [0.1, 0.9]], [[0.6, 0.4], [0.5, 0.5]]])
    tags = torch.tensor([[0, 1], [-1, -1]])  # the second sentence is unlabelled
    mask = torch.tensor([[True, True], [True, False]])  # and one word long
    alpha, T = 0.3, 2.0

    def softmax(z):
        e = [math.exp(x) for x in z]
        return [x / sum(e) for x in e]

    kd = 0.0
    for b, j in ((0, 0), (0, 1), (1, 0)):
        q = softmax([x / T for x in logits[b, j].tolist()])
        kd += sum(p * math.log(p / qq) for p, qq in zip(p_t[b, j].tolist(), q))
    ce = -math.log(softmax([1.0, 0.0])[0]) - math.log(softmax([0.0, 2.0])[1])
    want = (alpha * T * T * kd + (1 - alpha) * ce) / 2
    assert token_kd_loss(logits, p_t, tags, mask, alpha, T).item() == pytest.approx(want, rel=1e-5)
    # the teacher at temperature T: logits / T, or marginals to the power 1/T renormalised
    z = torch.tensor([[2.0, 0.0, -1.0]])
    assert torch.allclose(teacher_probs(z, "logits", 2.0), torch.softmax(z / 2, -1))
    assert torch.allclose(teacher_probs(torch.softmax(z, -1), "marginals", 2.0), torch.softmax(z / 2, -1), atol=1e-6)


def test_token_kd_student_learns_from_the_cache(cache, tmp_path):
    from seqdistill.cli.train import main as train_cli
    from seqdistill.students.archs import load_student
    from seqdistill.students.common import predict_tags

    r = CliRunner().invoke(
        train_cli,
        [
            "token-kd",
            "--cache",
            cache,
            "--out",
            str(tmp_path / "s"),
            "--embedding",
            "random",
            "--embedding-dim",
            "16",
            "--hidden-size",
            "16",
            "--epochs",
            "12",
            "--lr",
            "0.02",
            "--batch-size",
            "8",
            "--dropout",
            "0.1",
            "--device",
            "cpu",
        ],
    )
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "s" / "training.json").read_text())
    assert summary["recipe"] == "token-kd" and summary["best_dev_f1"] > 0.9
    assert "loss_token-kd" in summary["history"][0]
    model, tok = load_student(tmp_path / "s")
    assert model.config.arch == "bilstm-tagger"
    assert predict_tags(model, tok, [["anna", "visits", "the", "rome"]]) == [["B-PER", "O", "O", "B-LOC"]]


def test_token_kd_resumes_bit_identical_and_trains_under_torchrun(cache, tmp_path):
    resumes_and_runs_under_torchrun(
        "token-kd",
        cache,
        {
            "embedding": "random",
            "embedding-dim": 8,
            "hidden-size": 8,
            "epochs": 2,
            "patience": 5,
            "batch-size": 8,
            "checkpoint-every": 3,
        },
        tmp_path,
        kill_at=17,
    )
