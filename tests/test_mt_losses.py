"""MT-BERT's losses (paper 002, eqs. 1-2) against hand computations."""

import math

import pytest
import torch

from seqdistill.students.losses import (
    MTHiddenLoss,
    ensemble_distillation_loss,
    mt_distillation_loss,
    teacher_weight,
)


def _soft_ce(p, z):
    """-Σ p_c log softmax(z)_c by hand."""
    lse = math.log(sum(math.exp(v) for v in z))
    return -sum(pc * (zc - lse) for pc, zc in zip(p, z))


def _softmax(z):
    e = [math.exp(v) for v in z]
    return [v / sum(e) for v in e]


def test_mt_distillation_loss_is_eq2_by_hand():
    t = 2.0
    s = torch.tensor([[[1.0, 0.0], [0.5, -0.5], [9.0, 9.0]]])  # third word is padding
    z1 = torch.tensor([[[2.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    z2 = torch.tensor([[[0.0, 3.0], [1.0, 1.0], [0.0, 0.0]]])
    mask = torch.tensor([[True, True, False]])
    ce1, ce2 = 0.3, 2.0  # the teachers' per-word cross-entropy against the gold tags
    got = mt_distillation_loss(
        s, [z1, z2], [teacher_weight(torch.tensor([ce1])), teacher_weight(torch.tensor([ce2]))], mask, temperature=t
    )
    want = 0.0
    for z, ce in ((z1, ce1), (z2, ce2)):
        per_word = [
            _soft_ce(_softmax([v / t for v in z[0, i].tolist()]), [v / t for v in s[0, i].tolist()]) for i in range(2)
        ]
        want += (sum(per_word) / 2) / (1 + ce)
    assert got.shape == (1,) and got.item() == pytest.approx(want, rel=1e-6)


def test_the_teacher_closer_to_gold_weighs_more():
    s = torch.zeros(1, 2, 3, requires_grad=True)
    mask = torch.ones(1, 2, dtype=torch.bool)
    good = torch.tensor([[[4.0, 0.0, 0.0], [0.0, 4.0, 0.0]]])  # agrees with gold; low gold CE
    bad = torch.tensor([[[0.0, 0.0, 4.0], [0.0, 0.0, 4.0]]])
    w_good, w_bad = teacher_weight(torch.tensor([0.05])), teacher_weight(torch.tensor([3.0]))
    assert w_good.item() > w_bad.item()
    mt_distillation_loss(s, [good, bad], [w_good, w_bad], mask).sum().backward()
    g = -s.grad[0]  # descent direction: towards the weighted mean of the teachers' soft labels
    assert g[0, 0] > g[0, 2] and g[1, 1] > g[1, 2]  # the student is pulled towards the good teacher
    s.grad = None
    mt_distillation_loss(s, [good, bad], [None, None], mask).sum().backward()
    g = -s.grad[0]
    assert g[0, 0] == pytest.approx(g[0, 2].item())  # unweighted: both teachers pull alike


def test_unlabelled_rows_weigh_one():
    w = teacher_weight(torch.tensor([1.0, 1.0]), labelled=torch.tensor([True, False]))
    assert w.tolist() == [0.5, 1.0]


def test_ensemble_loss_is_ce_to_the_mean_soft_label():
    s = torch.tensor([[[0.2, -0.1]]])
    z1, z2 = torch.tensor([[[1.0, 0.0]]]), torch.tensor([[[0.0, 2.0]]])
    p = [(a + b) / 2 for a, b in zip(_softmax([1.0, 0.0]), _softmax([0.0, 2.0]))]
    got = ensemble_distillation_loss(s, [z1, z2], torch.ones(1, 1, dtype=torch.bool))
    assert got.item() == pytest.approx(_soft_ce(p, [0.2, -0.1]), rel=1e-6)


def test_mt_hidden_loss_is_eq1_by_hand():
    torch.manual_seed(0)
    loss = MTHiddenLoss(student_dim=2, teacher_dims=[3, 4], student_layers=2)
    mask = torch.tensor([[True, False]])
    hs = [torch.randn(1, 2, 2) for _ in range(2)]
    ht = [[torch.randn(1, 2, 3) for _ in range(2)], [torch.randn(1, 2, 4) for _ in range(2)]]
    want = 0.0
    for i in range(2):
        for j in range(2):
            W = loss.maps[i][j].weight.detach()
            proj = (W @ ht[i][j][0, 0]).tolist()
            want += sum((a - b) ** 2 for a, b in zip(hs[j][0, 0].tolist(), proj)) / 2  # one word, 2 dims
    assert loss(hs, ht, mask).item() == pytest.approx(want, rel=1e-5)
    assert sum(p.numel() for p in loss.parameters()) == 2 * (2 * 3) + 2 * (2 * 4)


def test_mt_hidden_loss_divides_each_teacher_layer_by_its_scale():
    torch.manual_seed(0)
    scales = [[2.0, 4.0], [0.5, 10.0]]
    plain = MTHiddenLoss(student_dim=2, teacher_dims=[3, 4], student_layers=2)
    scaled = MTHiddenLoss(student_dim=2, teacher_dims=[3, 4], student_layers=2, scales=scales)
    scaled.load_state_dict(plain.state_dict())  # the scales are not in the state dict
    mask = torch.tensor([[True, True]])
    hs = [torch.randn(1, 2, 2) for _ in range(2)]
    ht = [[torch.randn(1, 2, 3) for _ in range(2)], [torch.randn(1, 2, 4) for _ in range(2)]]
    divided = [[h / s for h, s in zip(layers, row)] for layers, row in zip(ht, scales)]
    torch.testing.assert_close(scaled(hs, ht, mask), plain(hs, divided, mask))
    assert not torch.allclose(scaled(hs, ht, mask), plain(hs, ht, mask))
    with pytest.raises(ValueError, match="one per teacher and student layer"):
        MTHiddenLoss(student_dim=2, teacher_dims=[3, 4], student_layers=2, scales=[[1.0, 1.0]])
