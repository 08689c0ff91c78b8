"""Paper 003's training pieces against hand computations: Dice loss (eq. 2), the BILOU loss
(eq. 1) and the log-proportional entity sampler (§3.2)."""

import math

import pytest
import torch

from seqdistill.students.losses import bilou_loss, dice_loss
from seqdistill.students.sampler import LogProportionalSampler


def test_dice_loss_by_hand():
    probs = torch.tensor([[[0.2, 0.7, 0.1], [0.6, 0.3, 0.1], [0.0, 0.0, 1.0]]])  # third word: padding
    targets = torch.tensor([[1, 0, -1]])
    mask = torch.tensor([[True, True, False]])
    w = torch.tensor([0.0, 1.0, 1.0])
    g = 1e-6
    # class 1: sum p*y = 0.7; sum p^2 = 0.49 + 0.09; sum y^2 = 1. class 2: p*y = 0; p^2 = 0.01 + 0.01; y = 0
    dsc1 = (g + 2 * 0.7) / (g + 0.58 + 1)
    dsc2 = (g + 0) / (g + 0.02 + 0)
    want = ((1 - dsc1) + (1 - dsc2)) / 3  # class O weighs 0; C = 3
    assert dice_loss(probs, targets, mask, w, g).item() == pytest.approx(want, rel=1e-5)


def test_bilou_loss_is_eq1_by_hand():
    logits = torch.tensor([[[[2.0, 0.0, 0.0, 0.0, 1.0]], [[0.0, 0.0, 0.0, 0.0, 0.0]]]])  # B=1, L=2, E=1
    targets = torch.tensor([[[4], [0]]])  # U then O
    mask = torch.ones(1, 2, dtype=torch.bool)
    p0 = torch.softmax(logits[0, 0, 0], -1).tolist()
    p1 = [0.2] * 5
    ce = -(math.log(p0[4]) + math.log(p1[0])) / 2
    # Dice over B, I, L, U (O weighs 0), C = 5
    dl = 0.0
    for c in range(1, 5):
        py = p0[c] * (c == 4)
        p2 = p0[c] ** 2 + p1[c] ** 2
        y2 = float(c == 4)
        dl += 1 - (1e-6 + 2 * py) / (1e-6 + p2 + y2)
    want = 0.2 * ce + dl / 5
    assert bilou_loss(logits, targets, mask).item() == pytest.approx(want, rel=1e-5)


def test_sampler_draws_entities_in_log_proportion():
    data = [["A"]] * 900 + [["B"]] * 90 + [["C"]] * 10
    s = LogProportionalSampler(data, num_samples=3000, seed=1)
    share = {
        t: math.log1p(n) / (math.log1p(900) + math.log1p(90) + math.log1p(10))
        for t, n in (("A", 900), ("B", 90), ("C", 10))
    }
    assert s.share == pytest.approx(share)
    seen = {"A": 0, "B": 0, "C": 0}
    for i in s:
        seen[data[i][0]] += 1
    total = sum(seen.values())
    for t in seen:
        assert seen[t] / total == pytest.approx(share[t], abs=0.01)  # the natural shares are 0.90 / 0.09 / 0.01
    # the first draws by hand (shares .50/.33/.17): deficits share*(n+1) - seen pick A (.50), then B
    # (.66 against A -.01, C .35), then C (.53 against A .49, B -.01)
    first = [data[i][0] for i in list(iter(LogProportionalSampler(data, num_samples=3, seed=1)))]
    assert first == ["A", "B", "C"]


def test_sampler_keeps_plain_sentences_and_is_seeded():
    data = [[]] * 50 + [["A", "A"]] * 10 + [["B"]] * 40
    s = LogProportionalSampler(data, num_samples=2000, seed=3)
    draws = list(s)
    plain = sum(1 for i in draws if not data[i]) / len(draws)
    assert plain == pytest.approx(0.5, abs=0.05)
    assert draws == list(s)  # same epoch, same draws
    s.set_epoch(1)
    assert draws != list(s)
