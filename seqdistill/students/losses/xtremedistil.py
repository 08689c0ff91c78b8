"""XtremeDistil's losses (paper 001 §3-4): word-level, each returns one value per sentence
(``[B]``)."""

from __future__ import annotations

import torch
from torch import Tensor


def cross_entropy_loss(logits: Tensor, tags: Tensor, mask: Tensor) -> Tensor:
    """Hard-label loss (eq. 2): L_CE = - sum_k log p^s_{y_k}(x_k), with p^s = softmax(W_s z~)
    (eq. 1). Words with tag -1 (padding, or no label) count for nothing."""
    keep = mask & (tags >= 0)
    log_p = torch.log_softmax(logits.float(), dim=-1).gather(-1, tags.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return -(log_p * keep.to(log_p.dtype)).sum(1)


def logit_loss(regression: Tensor, teacher_logits: Tensor, mask: Tensor) -> Tensor:
    """Logit loss (eq. 4): L_LL = 1/2 sum_k || r^s(x_k) - logit(p^t(x_k)) ||^2, the student's
    regressor output against the teacher's logits (a CRF teacher's emissions)."""
    sq = (regression.float() - teacher_logits.float()).pow(2).sum(-1)
    return 0.5 * (sq * mask.to(sq.dtype)).sum(1)


def representation_loss(projection: Tensor, teacher_hidden: Tensor, mask: Tensor) -> Tensor:
    """Representation loss (eq. 6): L_RL = sum_k KLD(z~^s(x_k), z^t_l(x_k)).

    A KL divergence needs distributions, and neither the projection nor a hidden state is one;
    the paper does not say how it makes them so. Here both are turned into distributions over the
    hidden dimensions by a softmax, and the divergence is KL(softmax(z^t) || softmax(z~^s)), the
    teacher as the target distribution (the direction of eq. 10's token-level KL)."""
    log_s = torch.log_softmax(projection.float(), dim=-1)
    log_t = torch.log_softmax(teacher_hidden.float(), dim=-1)
    kl = (log_t.exp() * (log_t - log_s)).sum(-1)
    return (kl * mask.to(kl.dtype)).sum(1)
