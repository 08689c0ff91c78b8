"""Attention over a prefix held once for a whole batch: an in-context teacher's demonstrations
(issue 55), shared by every sentence and beam of SenTScore's search without a copy per row.

The demonstrations' keys and values are computed once (:func:`prefix_states`: one forward pass of
the prefix alone) and attached to each attention module for the length of a search
(:func:`attached`). The search's own key/value cache then holds the rows' tokens only, so that
its per-step work (the cache's concatenations, the beams' selection and alignment) does not grow
with the demonstrations; rows take positions after the prefix (explicit ``position_ids``).

Decision: a transformers attention function of its own (``AttentionInterface``, registered as
``seqdistill-prefix`` with sdpa's mask), rather than the prefix copied into every row's cache.
Copied, a 20-demonstration prefix of Gemma 3 270M is 1,666 tokens a row, and every decoder call
of the search concatenated and every step realigned all of it, for every row: docs/BENCHMARKS.md
has both. The function computes, for each query, one softmax over the prefix's scores and the
row's own (masked) scores, then the weighted sum of both values: the same arithmetic as attention
over their concatenation. Modules without a prefix attached (any other use of the model) run
sdpa as before.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import Tensor

NAME = "seqdistill-prefix"


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if NAME not in AttentionInterface._global_mapping:

        def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
            prefix = getattr(module, "_seqdistill_prefix", None)
            if prefix is None:
                return sdpa_attention_forward(
                    module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
                )
            return prefix_attention(query, key, value, attention_mask, prefix, scaling), None

        AttentionInterface.register(NAME, attention)
        AttentionMaskInterface.register(NAME, sdpa_mask)


def prefix_attention(
    query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, prefix: tuple[Tensor, Tensor], scaling: float
) -> Tensor:
    """Attention of ``query [B, H, Q, D]`` over the shared ``prefix`` (keys and values ``[1, Hkv,
    P, D]``, every query sees all of it) and the rows' own ``key``/``value [B, Hkv, S, D]`` under
    ``mask`` (sdpa's: boolean ``[B, 1, Q, S]``, True where a query may look; None: causal, the
    queries being the last Q keys). Returns ``[B, Q, H, D]``, as transformers' sdpa does."""
    B, H, Q, D = query.shape
    kv_heads, S = key.shape[1], key.shape[2]
    q = query.reshape(B, kv_heads, H // kv_heads, Q, D).float()  # the query heads of each key/value head
    pk, pv = (x[0].float() for x in prefix)
    scores_prefix = torch.einsum("bkgqd,kpd->bkgqp", q, pk) * scaling
    scores_rows = torch.einsum("bkgqd,bksd->bkgqs", q, key.float()) * scaling
    if mask is None:
        mask = torch.ones(Q, S, dtype=torch.bool, device=query.device).tril(S - Q)[None, None]
    scores_rows = scores_rows.masked_fill(~mask[:, :, None].bool(), float("-inf"))
    probs = torch.softmax(torch.cat([scores_prefix, scores_rows], -1), -1)
    P = pk.shape[1]
    out = torch.einsum("bkgqp,kpd->bkgqd", probs[..., :P], pv)
    out = out + torch.einsum("bkgqs,bksd->bkgqd", probs[..., P:], value.float())
    return out.reshape(B, H, Q, D).transpose(1, 2).to(query.dtype).contiguous()


def prefix_states(model, ids: Tensor) -> list[tuple[Tensor, Tensor]]:
    """Each layer's keys and values of ``ids [1, P]`` (positions 0..P-1), from one forward pass."""
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    return [(layer.keys, layer.values) for layer in getattr(cache, "self_attention_cache", cache).layers]


def _attention_modules(model) -> list:
    """The self-attention modules of a decoder-only LM, in layer order."""
    found = [m for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "num_key_value_groups")]
    return sorted(found, key=lambda m: m.layer_idx)


@contextmanager
def attached(model, states: list[tuple[Tensor, Tensor]]):
    """For the block, every attention module of ``model`` attends to its layer's ``states`` before
    the rows' own tokens (the model runs :data:`NAME`'s attention; as before after the block)."""
    _register()
    modules = _attention_modules(model)
    if len(modules) != len(states):
        raise ValueError(f"a shared prefix of {len(states)} layers for a model of {len(modules)} attention layers")
    before = model.config._attn_implementation
    model.set_attn_implementation(NAME)
    try:
        for m, s in zip(modules, states):
            m._seqdistill_prefix = s
        yield
    finally:
        for m in modules:
            m.__dict__.pop("_seqdistill_prefix", None)
        model.set_attn_implementation(before)
