"""Graph pieces that teachers and students both export to ONNX (``distill-export``): a bidirectional
LSTM that runs exactly over padded batches, and an encoder with its linear head over framed
segments. Each model class builds its own graph from these in ``export_graph``
(docs/ARCHITECTURE.md); ``seqdistill.deploy.export`` traces it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Each sentence of ``x [B, T, D]`` reversed within its first ``lengths[b]`` steps (padding stays)."""
    t = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
    n = lengths.unsqueeze(1)
    index = torch.where(t < n, n - 1 - t, t)
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.shape[2]))


class PaddedBiLSTM(nn.Module):
    """A (multi-layer) bidirectional ``nn.LSTM`` as unidirectional LSTMs over padded batches: the
    forward direction as is (padding comes after every real word), the backward one over each
    sentence reversed within its length. Same outputs as the packed LSTM on real words.

    Decision: each direction is a unidirectional ONNX ``LSTM`` (ONNX Runtime's fused kernel,
    quantizable to int8), so that padding never reaches a real word without packing."""

    def __init__(self, lstm: nn.LSTM):
        super().__init__()
        self.layers = nn.ModuleList()
        for layer in range(lstm.num_layers):
            pair = nn.ModuleList()
            for suffix in ("", "_reverse"):
                one = nn.LSTM(
                    lstm.input_size if layer == 0 else 2 * lstm.hidden_size,
                    lstm.hidden_size,
                    batch_first=True,
                    bias=lstm.bias,
                )
                for name in ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if lstm.bias else ()):
                    getattr(one, f"{name}_l0").data.copy_(getattr(lstm, f"{name}_l{layer}{suffix}").data)
                pair.append(one)
            self.layers.append(pair)

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        for fwd, bwd in self.layers:
            back = reverse_padded(bwd(reverse_padded(x, lengths))[0], lengths)
            x = torch.cat([fwd(x)[0], back], -1)
        return x


class SegmentsGraph(nn.Module):
    """An encoder and its linear head over framed segments: token scores ``[N, Lt, T]``."""

    def __init__(self, encoder: nn.Module, head: nn.Module):
        super().__init__()
        self.encoder, self.head = encoder, head

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.head(self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state)
