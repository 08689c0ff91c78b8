"""A model's parameters as paper 003's Table 1 counts them: all, and those outside the embedding tables.

Counted as the export ships the model: a projection that the export folds into the input table (the
cnn-crf and rnn students' ``--projection P``: ``E P^T``, ``[V, P]``) counts as that ``[V, P]`` table,
not as the ``[V, D]`` table and the ``P x D`` matrix it trains with. A model names such a projection
by its ``folded_projection`` attribute (an ``nn.Linear``, or None).
"""

from __future__ import annotations

from torch import nn

from .word_vectors import HashedWordVectors, WordVectors


def parameter_counts(model: nn.Module) -> tuple[int, int]:
    """All parameters, and those outside the word embedding matrices: the largest ``nn.Embedding`` or
    ``nn.EmbeddingBag`` (the input table) and a student's pretrained word vector tables
    (``--word-vectors``)."""
    word_tables = {
        id(m.embed): m.embed.weight.numel() for m in model.modules() if isinstance(m, (WordVectors, HashedWordVectors))
    }
    inputs = [m for m in model.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and id(m) not in word_tables]
    table = max(inputs, key=lambda m: m.weight.numel(), default=None)
    total = sum(p.numel() for p in model.parameters())
    shipped = table.weight.numel() if table is not None else 0
    project = getattr(model, "folded_projection", None)
    if project is not None and table is not None:  # shipped: E P^T [V, P] instead of E [V, D] and P [P, D]
        total -= shipped + project.weight.numel()
        shipped = table.num_embeddings * project.out_features
        total += shipped
    return total, total - shipped - sum(word_tables.values())
