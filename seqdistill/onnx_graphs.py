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
        mask = layer_masks(self.encoder.config, attention_mask)
        return self.head(self.encoder(input_ids=input_ids, attention_mask=mask).last_hidden_state)


def layer_masks(config, attention_mask: Tensor):
    """The attention masks of an encoder whose layers are typed (Gemma 3 with bidirectional
    attention: EmbeddingGemma), built from the padding mask with plain tensor ops, as the model
    accepts them ready-made: ``full_attention`` every real token, ``sliding_attention`` the real
    tokens less than ``sliding_window`` positions away (transformers' bidirectional window overlay).
    transformers builds them with ``torch.vmap``, which the ONNX exporter cannot trace. Any other
    encoder gets its padding mask back as it is."""
    if not (getattr(config, "layer_types", None) and getattr(config, "use_bidirectional_attention", False)):
        return attention_mask
    n = attention_mask.shape[1]
    keys = attention_mask.bool()[:, None, None, :]  # [B, 1, 1, K]
    pos = torch.arange(n, device=attention_mask.device)
    near = (pos[:, None] - pos[None, :]).abs() < config.sliding_window  # [Q, K]
    masks = {"full_attention": keys.expand(-1, 1, n, -1), "sliding_attention": keys & near}
    if config._attn_implementation == "eager":  # additive float masks; sdpa takes booleans
        low = torch.finfo(torch.float32).min
        masks = {k: torch.zeros(m.shape).masked_fill(~m, low) for k, m in masks.items()}
    return masks
