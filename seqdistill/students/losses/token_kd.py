"""Token-level KD's loss (Hinton et al., 2015), over a CRF teacher's marginals or a softmax
teacher's logits (``recipes/token_kd.py`` gives the recipe and its decisions):

    L = alpha T^2 sum_j KL(P^t_T(y_j) || P^s_T(y_j)) + (1 - alpha) sum_j CE(y_j, P^s(y_j))
"""

from __future__ import annotations

import torch

from .mgkd import teacher_softmax, token_kl_loss
from .xtremedistil import cross_entropy_loss


def teacher_probs(scores: torch.Tensor, kind: str, temperature: float) -> torch.Tensor:
    """P^t_T: softmax(logits / T), or the marginals to the power 1/T, renormalised."""
    if kind == "logits":
        return teacher_softmax(scores, temperature)
    return torch.softmax(torch.log(scores.float().clamp(min=1e-12)) / temperature, dim=-1)


def token_kd_loss(
    logits: torch.Tensor,
    p_teacher: torch.Tensor,
    tags: torch.Tensor,
    mask: torch.Tensor,
    alpha: float,
    temperature: float,
) -> torch.Tensor:
    """The module docstring's L for one batch (a scalar): summed over a sentence's words, averaged
    over the batch's sentences (the CE term over the labelled rows only)."""
    kd = token_kl_loss(logits, p_teacher, mask, temperature).sum()
    ce = cross_entropy_loss(logits, tags, mask).sum()  # rows without gold tags (-1) add nothing
    return (alpha * kd + (1 - alpha) * ce) / len(logits)
