"""A bidirectional ``nn.LSTM`` over a padded batch, exact on every real step, without packing.

    forward direction:   the LSTM over ``x`` as it is (padding comes after every real step)
    backward direction:  the reverse LSTM over each sentence reversed within its length, reversed back

Each direction runs as a unidirectional LSTM with the bidirectional module's own weights for that
layer and direction (``torch.func.functional_call`` over a weightless shell on the ``meta`` device),
so gradients reach the module's parameters as with packing and checkpoints do not change.

Decision: the students trained with ``pack_padded_sequence`` before. PyTorch's CPU kernel for packed
input steps through time with a shrinking batch; its fused kernel over a padded batch does the same
arithmetic several times faster. ``benchmarks/padded_lstm.py`` measures both on batches cut the way
the cache stream cuts them (sorted by length within a 4,096-sentence buffer), forward and backward,
one thread: 2.9x at XtremeDistil's 512 sentences of subwords, 1.3x at the BiLSTM-CRF's 32 sentences
of words (docs/BENCHMARKS.md, "The students' BiLSTM without packing"). The outputs on real steps are
the packed LSTM's up to float rounding (the benchmark and ``tests/test_padded_lstm.py`` check both
outputs and gradients); past each sentence's length they are zero, as ``pad_packed_sequence`` leaves
them. ``onnx_graphs.PaddedBiLSTM`` is the same computation for
export, over copies of the weights.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor, nn
from torch.func import functional_call

from ..onnx_graphs import reverse_padded

_WEIGHTS = ("weight_ih", "weight_hh")
_BIASES = ("bias_ih", "bias_hh")


@lru_cache(maxsize=None)
def _shell(input_size: int, hidden_size: int, bias: bool) -> nn.LSTM:
    """A one-layer unidirectional LSTM without storage: ``functional_call`` supplies its weights."""
    return nn.LSTM(input_size, hidden_size, batch_first=True, bias=bias, device="meta")


def bilstm(lstm: nn.LSTM, x: Tensor, lengths: Tensor) -> Tensor:
    """``lstm`` (bidirectional, ``batch_first``) over ``x [B, T, D]`` whose sentence b has
    ``lengths[b]`` real steps: ``[B, T, 2H]``, zero past each length. Dropout between layers as
    ``nn.LSTM`` applies it (``lstm.dropout`` in training)."""
    if not (lstm.bidirectional and lstm.batch_first) or lstm.proj_size:
        raise ValueError("bilstm() runs a bidirectional, batch_first LSTM without projections")
    lengths = lengths.to(x.device)
    mask = (torch.arange(x.shape[1], device=x.device).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(-1)
    names = _WEIGHTS + (_BIASES if lstm.bias else ())
    for layer in range(lstm.num_layers):
        if layer and lstm.dropout and lstm.training:
            x = nn.functional.dropout(x, lstm.dropout, training=True)
        shell = _shell(x.shape[-1], lstm.hidden_size, lstm.bias)
        directions = []
        for suffix in ("", "_reverse"):
            weights = {f"{n}_l0": getattr(lstm, f"{n}_l{layer}{suffix}") for n in names}
            if suffix:
                h = reverse_padded(functional_call(shell, weights, (reverse_padded(x, lengths),))[0], lengths)
            else:
                h = functional_call(shell, weights, (x,))[0]
            directions.append(h)
        x = torch.cat(directions, -1) * mask
    return x
