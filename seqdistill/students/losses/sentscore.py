"""SenTScore KD's loss (paper 004 §4.2)."""

from __future__ import annotations

import torch
from torch import Tensor


def sentscore_kd_loss(
    logits: Tensor,
    tags: Tensor,
    teacher_scores: Tensor,
    mask: Tensor,
    kd_mask: Tensor,
    lambda_kl: float = 1.0,
    temperature: float = 10.0,
    soften_student: bool = False,
) -> Tensor:
    """Eq. 2 per sentence, summed over its words:

        - sum_k (y*_i)_k log (q_i)_k + lambda_KL KL(p*_i || q_i),   p*_i = softmax(u*_i / tau)

    with y* the hard label (gold on gold rows, the teacher's SenTScore path on silver rows), u*_i the
    teacher's tag scores (-inf on tags sBIO forbids, which get p* = 0) and q_i the student's softmax.
    The KL term counts on the rows of ``kd_mask [B]`` only: the silver rows (the paper gives the
    student the teacher's scores "in the rest of the training data", §5.2) or every row (its Table
    5, where lambda_KL = 1 changes a student with no silver rows); the recipe's ``kd_rows`` chooses.
    The temperature rescales the teacher's distribution alone, as in the paper's words ("a
    temperature parameter tau to rescale the distribution SenTScore defines", §5.2). Per word, the
    minimiser of eq. 2 at lambda_KL = 1 is then q = (y* + p*) / 2, whose argmax is y* wherever the
    teacher's path is the argmax of its own scores (every silver word of a K = 1 cache): the KL term
    changes how sure the student is, never which tag it prefers.

    ``soften_student`` is the other reading, Hinton et al.'s (2015) "standard" KD, which the paper
    also names (§4.2): the student's distribution is softened by the same tau, and the KL term is
    scaled by tau^2 so that its gradients keep their size,

        - sum_k (y*_i)_k log (q_i)_k + lambda_KL tau^2 KL(p*_i || softmax(z_i / tau)),

    whose KL minimiser is z_i = u*_i + c: the student learns the teacher's relative scores of the
    wrong tags too."""
    log_q = torch.log_softmax(logits.float(), dim=-1)
    keep = mask & (tags >= 0)
    ce = -(log_q.gather(-1, tags.clamp(min=0).unsqueeze(-1)).squeeze(-1) * keep).sum(1)
    if lambda_kl == 0:
        return ce
    log_p = torch.log_softmax(teacher_scores.float() / temperature, dim=-1)
    p = log_p.exp()
    log_q_kd = torch.log_softmax(logits.float() / temperature, dim=-1) if soften_student else log_q
    kl = torch.where(p > 0, p * (log_p - log_q_kd), torch.zeros_like(p)).sum(-1)
    kl = (kl * mask).sum(1) * kd_mask.to(kl.dtype)
    return ce + lambda_kl * (temperature**2 if soften_student else 1.0) * kl
