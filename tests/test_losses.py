"""MGKD losses against hand computations."""

import itertools
import math

import pytest
import torch

from seqdistill.students.losses import (
    UncertaintyWeighting,
    hard_loss,
    seq_ce_loss,
    seq_ce_renormalised_loss,
    seq_fuzzy_loss,
    student_path_log_probs,
    teacher_softmax,
    tempered_kbest,
    token_kl_loss,
)

NEG = float("-inf")


def test_seq_ce_and_fuzzy_by_hand():
    t = torch.log(torch.tensor([[0.5, 0.2, 0.0]]))  # third beam padded (-inf)
    s = torch.log(torch.tensor([[0.3, 0.1, 0.0]]))
    want_ce = -(0.5 * math.log(0.3) + 0.2 * math.log(0.1)) - 0.3 * math.log(1 - 0.4)
    want_fuzzy = -0.7 * math.log(0.4) - 0.3 * math.log(0.6)
    assert seq_ce_loss(t, s).item() == pytest.approx(want_ce, rel=1e-6)
    assert seq_fuzzy_loss(t, s).item() == pytest.approx(want_fuzzy, rel=1e-6)
    # a student equal to a teacher that puts all its mass on its k-best has no residual term
    full = torch.log(torch.tensor([[0.6, 0.4]]))
    assert seq_ce_loss(full, full).item() == pytest.approx(-(0.6 * math.log(0.6) + 0.4 * math.log(0.4)), rel=1e-5)
    assert torch.isfinite(seq_fuzzy_loss(full, full)).all()


def test_renormalised_seq_ce_and_tempered_kbest_by_hand():
    t = torch.log(torch.tensor([[0.5, 0.2, 0.0]]))  # third beam padded
    s = torch.log(torch.tensor([[0.3, 0.1, 0.0]]))
    # without the residual term: teacher 5/7, 2/7 against student 3/4, 1/4
    want = -(5 / 7 * math.log(3 / 4) + 2 / 7 * math.log(1 / 4))
    assert seq_ce_renormalised_loss(t, s).item() == pytest.approx(want, rel=1e-6)
    # T = 2: sqrt(0.5), sqrt(0.2) renormalised to the K paths' mass 0.7; the padded beam stays -inf
    q = tempered_kbest(t, 2.0).exp()[0]
    a, b = math.sqrt(0.5), math.sqrt(0.2)
    assert q.tolist() == pytest.approx([0.7 * a / (a + b), 0.7 * b / (a + b), 0.0], rel=1e-6)
    assert tempered_kbest(t, 1.0) is t
    assert tempered_kbest(t, 0.05).exp()[0, 0].item() == pytest.approx(0.7, rel=1e-6)  # all on the best
    # so the fuzzy loss and the residual term do not move with T
    assert seq_fuzzy_loss(tempered_kbest(t, 3.0), s).item() == pytest.approx(seq_fuzzy_loss(t, s).item(), rel=1e-6)
    # a row without paths scores 0 and stays finite under both
    none = torch.full((1, 3), NEG)
    assert seq_ce_renormalised_loss(none, s).item() == 0.0
    assert torch.isneginf(tempered_kbest(none, 2.0)).all()


def test_a_row_without_paths_scores_zero_and_leaves_finite_gradients():
    t = torch.tensor([[math.log(0.5), math.log(0.2), NEG], [NEG, NEG, NEG]])
    for loss in (seq_ce_loss, seq_ce_renormalised_loss, seq_fuzzy_loss):
        s = torch.tensor([[math.log(0.3), math.log(0.1), NEG], [NEG, NEG, NEG]], requires_grad=True)
        out = loss(tempered_kbest(t, 2.0), s)
        assert out[1].item() == 0.0 and torch.isfinite(out).all()
        out.sum().backward()
        assert torch.isfinite(s.grad).all() and (s.grad[1] == 0).all()


def test_losses_are_minimised_where_the_student_matches_the_teacher():
    t = torch.log(torch.tensor([[0.5, 0.2]]))
    s = torch.log(torch.tensor([[0.5, 0.2]])).requires_grad_(True)
    seq_ce_loss(t, s).sum().backward()
    # d/ds_j of -p_j^t s_j - r^t log(1 - sum exp s) at s = t: -p_j + r^t p_j / r^s = 0
    assert s.grad.abs().max().item() < 1e-6


def test_student_path_log_probs_match_enumeration():
    g = torch.Generator().manual_seed(0)
    B, L, T = 2, 4, 3
    em, tr = torch.randn(B, L, T, generator=g, dtype=torch.float64), torch.randn(T, T, generator=g, dtype=torch.float64)
    st, en = torch.randn(T, generator=g, dtype=torch.float64), torch.randn(T, generator=g, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    paths = torch.tensor([[[0, 1, 2, 0], [2, 2, 2, 2]], [[1, 0, -1, -1], [-1, -1, -1, -1]]])
    got = student_path_log_probs(em, mask, paths, tr, st, en)
    for b, n in enumerate([4, 2]):
        scores = {}
        for y in itertools.product(range(T), repeat=n):
            s = (
                st[y[0]]
                + sum(em[b, i, y[i]] for i in range(n))
                + en[y[-1]]
                + sum(tr[y[i - 1], y[i]] for i in range(1, n))
            )
            scores[y] = s
        log_z = torch.logsumexp(torch.stack(list(scores.values())), 0)
        for k in range(2):
            if paths[b, k, 0] < 0:
                assert got[b, k] == NEG
            else:
                y = tuple(paths[b, k, :n].tolist())
                assert got[b, k].item() == pytest.approx((scores[y] - log_z).item(), abs=1e-9)
        gold = paths[b, 0].clamp(min=0).unsqueeze(0)
        nll = hard_loss(em[b : b + 1], mask[b : b + 1], gold, tr, st, en)
        assert nll.item() == pytest.approx(-(scores[tuple(paths[b, 0, :n].tolist())] - log_z).item(), abs=1e-9)


def test_token_kl_by_hand():
    student = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])
    teacher = torch.tensor([[[0.9, 0.1], [0.3, 0.7]]])
    mask = torch.tensor([[True, False]])
    p_s = torch.softmax(torch.tensor([1.0, 0.0]), 0)
    want = 0.9 * math.log(0.9 / p_s[0]) + 0.1 * math.log(0.1 / p_s[1])
    assert token_kl_loss(student, teacher, mask).item() == pytest.approx(want, rel=1e-6)
    p_s2 = torch.softmax(torch.tensor([0.5, 0.0]), 0)  # temperature 2
    want2 = 4 * (0.9 * math.log(0.9 / p_s2[0]) + 0.1 * math.log(0.1 / p_s2[1]))
    assert token_kl_loss(student, teacher, mask, temperature=2.0).item() == pytest.approx(want2, rel=1e-6)
    torch.testing.assert_close(teacher_softmax(torch.tensor([0.0, math.log(3.0)])), torch.tensor([0.25, 0.75]))


def test_uncertainty_weighting_by_hand():
    w = UncertaintyWeighting(3)
    with torch.no_grad():
        w.log_weights.copy_(torch.log(torch.tensor([1.0, 2.0, 0.5])))
    losses = torch.tensor([3.0, 1.0, 4.0])
    want = 1 * 3 + 2 * 1 + 0.5 * 4 - 0.5 * (math.log(1) + math.log(2) + math.log(0.5))
    assert w(losses).item() == pytest.approx(want, rel=1e-6)
    # at the optimum lambda_i = 1 / (2 L_i): the gradient vanishes
    with torch.no_grad():
        w.log_weights.copy_(torch.log(1 / (2 * losses)))
    w(losses).backward()
    assert w.log_weights.grad.abs().max().item() < 1e-6
