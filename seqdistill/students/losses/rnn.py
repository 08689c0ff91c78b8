"""The losses of RNN students with one BILOU head per entity type (paper 003 §3.2)."""

from __future__ import annotations

import torch
from torch import Tensor


def dice_loss(probs: Tensor, targets: Tensor, mask: Tensor, class_weights: Tensor, gamma: float = 1e-6) -> Tensor:
    """Dice loss of one entity type (eq. 2), per sentence ``[B]``:

        DL_e = 1/C sum_c w_c (1 - (gamma + 2 sum_l p_lc y_lc) / (gamma + sum_l p_lc^2 + sum_l y_lc^2))

    ``probs [B, L, C]`` (softmax over the BILOU tags), ``targets [B, L]`` (tag ids, -1 on padding),
    ``class_weights [C]`` (w_c: 0 for O, 1 for the others). Eq. 2 prints the Dice *coefficient*
    (gamma + 2 sum p y) / (gamma + sum p^2 + y^2), a similarity the training would have to raise;
    the loss minimised here is one minus it, the Dice loss of Li et al. (2020), which the paper
    cites."""
    m = (mask & (targets >= 0)).unsqueeze(-1).to(probs.dtype)
    y = torch.nn.functional.one_hot(targets.clamp(min=0), probs.shape[-1]).to(probs.dtype) * m
    p = probs * m
    dsc = (gamma + 2 * (p * y).sum(1)) / (gamma + p.pow(2).sum(1) + y.pow(2).sum(1))  # [B, C]
    return ((1 - dsc) * class_weights).sum(-1) / probs.shape[-1]


def bilou_loss(logits: Tensor, targets: Tensor, mask: Tensor, ce_weight: float = 0.2, gamma: float = 1e-6) -> Tensor:
    """Eq. 1 per sentence ``[B]``: sum_e 0.2 CE_e + DL_e over the entity types, with CE_e the
    cross-entropy of type e's BILOU layer averaged over the sentence's words. ``logits
    [B, L, E, 5]``, ``targets [B, L, E]`` (-1 on padding); w_c = 0 for O (tag 0), 1 otherwise."""
    Bsz, L, E, C = logits.shape
    w = torch.ones(C, dtype=torch.float32, device=logits.device)
    w[0] = 0.0
    log_p = torch.log_softmax(logits.float(), -1)
    keep = (mask.unsqueeze(-1) & (targets >= 0)).float()  # [B, L, E]
    nll = -log_p.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    ce = (nll * keep).sum(1) / keep.sum(1).clamp(min=1)  # [B, E]
    probs = log_p.exp()
    dl = torch.stack([dice_loss(probs[:, :, e], targets[:, :, e], mask, w, gamma) for e in range(E)], -1)
    return (ce_weight * ce + dl).sum(-1)


def bilou_soft_loss(logits: Tensor, targets: Tensor, mask: Tensor) -> Tensor:
    """Stage 1 against a span teacher (issue 82): the student's BILOU distribution of each type and
    word against the teacher's per-type BILOU marginals (``bilou.span_layer_marginals``), as the
    KL divergence KL(p_t || softmax(z_s)), averaged over the real words and the types, one value for
    the batch. A span teacher gives probabilities, not logits, so paper 003's MSE on logits has no
    target here; the KL is 0 where the student's distribution is the teacher's. ``logits``,
    ``targets`` ``[B, L, E, 5]``, ``mask`` ``[B, L]``."""
    log_s = torch.log_softmax(logits.float(), -1)
    p = targets.float().clamp(min=0)
    kl = (p * (torch.log(p.clamp(min=1e-12)) - log_s)).sum(-1)  # [B, L, E]
    m = mask.unsqueeze(-1).to(kl.dtype)
    return (kl * m).sum() / (m.sum() * kl.shape[-1]).clamp(min=1)
