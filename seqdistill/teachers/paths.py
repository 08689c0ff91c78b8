"""k-best paths with global probabilities, log Z and marginals under a linear-chain CRF's scores,
and the cache fields that hold them: shared by the ``crf`` kind (its learned CRF, paper 000) and the
``softmax`` kind (its scheme CRF, below), so that both write the same fields the same way.

A softmax teacher's scheme CRF (issue 65): the emissions are the per-word log-softmax of its
logits, the transitions, start and end scores are 0 where the tag scheme allows a step and -inf
where it forbids one (:meth:`seqdistill.crf.CRF.from_schema` with its zero initial scores). So

    p(y | x) = prod_t softmax(z_t)[y_t] / Z(x)   over the paths y valid in the scheme,
    log Z(x) = log sum_{y valid} prod_t softmax(z_t)[y_t]  (<= 0: the mass the factorised model
               puts on valid paths),

the factorised model renormalised over valid paths. Its k-best paths, their global
log-probabilities and its marginals are what paper 000's sequence losses (seq-ce eq. 4, fuzzy
eq. 6) and token-pos (eq. 10) read, so MGKD takes any token classifier with all its losses.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ..cache_schema import FieldSpec, LabelSchema
from ..crf import CRF, kbest, marginals
from .base import TeacherOutput


def add_paths(
    out: TeacherOutput, emissions: Tensor, scores: tuple[Tensor, Tensor, Tensor], k: int, with_marginals: bool
) -> None:
    """k-best paths and log Z into ``out``, and the marginals on request, under ``scores``
    (transitions, start, end). log Z is computed once, by the marginals' forward pass when they are
    asked for, and reused by k-best."""
    transitions, start, end = scores
    log_z, shortest = None, out.shortest
    if with_marginals:
        out.marginals, log_z = marginals(
            emissions, out.word_mask, transitions, start, end, with_log_z=True, shortest=shortest
        )
    best = kbest(emissions, out.word_mask, transitions, start, end, k, log_z=log_z, shortest=shortest)
    out.log_z, out.kbest_paths, out.kbest_log_probs = best.log_z, best.paths, best.log_probs


def scheme_scores(schema: LabelSchema, device) -> tuple[Tensor, Tensor, Tensor]:
    """The scheme CRF's (transitions, start, end): 0 where ``schema``'s scheme allows, -inf where
    it forbids (module docstring)."""
    with torch.no_grad():
        return tuple(s.detach().to(device) for s in CRF.from_schema(schema).scores())


def path_fields(log_z: str, log_prob: str) -> list[FieldSpec]:
    """The k-best fields: the paths, their global log-probabilities and log Z, described as the
    kind computes them."""
    return [
        FieldSpec(
            "kbest_paths",
            "example",
            "int16",
            ("k", "words"),
            description="the k best tag paths (valid ones only), best first",
        ),
        FieldSpec(
            "kbest_log_probs",
            "example",
            "float32",
            ("k",),
            description=f"global log-probabilities of the k-best paths ({log_prob})",
        ),
        FieldSpec("log_z", "example", "float32", description=log_z),
    ]


def marginals_field(schema: LabelSchema, dense_dtype: str, description: str) -> FieldSpec:
    return FieldSpec("marginals", "word", dense_dtype, (schema.num_tags,), "zarr", description=description)


def path_values(host: dict, j: int, n: int) -> dict:
    """:func:`path_fields`' values of example ``j`` (``n`` words) of a batch on the host: the
    valid beams only."""
    lp = host["kbest_log_probs"][j]
    valid = np.isfinite(lp)
    return {
        "kbest_paths": host["kbest_paths"][j][valid, :n].astype(np.int16),
        "kbest_log_probs": lp[valid].astype(np.float32),
        "log_z": float(host["log_z"][j]),
    }
