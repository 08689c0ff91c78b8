"""SenTScore's beam search over a static key/value cache (issue 54): no host synchronisation inside
a step, and decoder calls of fixed shapes, so that a GPU can replay them (CUDA graphs, through
``torch.compile``).

The search of ``sentscore_search.py`` (Algorithm 1, eq. 1) is unchanged; only where the keys and
values live changes. There, the cache grows by concatenation, kept rows are right-aligned, and the
columns that are padding in every row are dropped after each step: counting them reads a tensor
on the host once a step, and every decoder call has a new shape. Here, for decoder-only LMs:

* **One buffer per layer, of the batch's final width**, ``W = P + L (C + 1)``: the left-padded
  prompts (``P`` columns), then for each word ``i`` a block of ``C`` columns (``C``: the longest
  tag's tokens) for the tag and one for the sentinel ``s_i``, at the same columns in every row.
  A decoder call writes its tokens in place at those columns (:class:`ColumnLayer`).
* **Gaps instead of alignment.** A beam whose tag is shorter than ``C`` leaves the rest of its
  block empty, masked out; positions are explicit (each row's count of real tokens), so a rotary
  or absolute position never sees a gap. The attention mask is built here, ``[R, 1, Q, W]``
  (True where a query may look: the row's filled columns, then the call's own tokens causally),
  and passed to the model as is, so transformers builds no mask (its mask code reads the padding
  on the host to decide whether it may skip the mask).
* **Rows stay, then halve.** A sentence that has ended keeps its rows (their scores are not
  recorded), so the calls of a step keep their shape, until half the rows or more have ended:
  then the ended rows leave, and the buffers are copied once to the new number of rows. A batch
  thus takes at most log2(B) + 1 numbers of rows, and never computes more than twice the live rows.
  The lengths are known on the host, so the search knows which sentences are live without
  reading the device.

Decisions:

* Decoder-only LMs only. An encoder-decoder's decoder (T5's relative position bias) would see the
  gaps as distances; those models keep the dynamic search.
* The attention implementations whose masks are known: ``sdpa`` and the shared-prefix attention
  (boolean masks), ``eager`` (an additive mask). Others (flash attention takes no 4-D mask) keep
  the dynamic search.
* The default (``static=None`` in :func:`sentscore`) is this search on a CUDA
  device and the dynamic one elsewhere. The two find the same paths, but their scores differ in
  the last bits (attention sums over other widths), and a CPU, which waits for nothing, gains
  little (docs/BENCHMARKS.md): a CPU build's shards stay byte for byte what they were.
* With ``compile_steps`` the decoder call of a step is compiled with ``torch.compile``
  (``mode="reduce-overhead"`` on a GPU: CUDA graphs), with dynamic sizes (rows, width, tokens fed):
  compiled once, for the first batch, and reused by every later one (without ``dynamic``, each new
  width recompiled, until torch's limit of 8 fell back to eager calls). On a GPU a CUDA graph is
  still recorded for each shape met. The prompt's call is not compiled (its shape is the batch's).
  The build does not ask for it: compiling costs minutes, which a short build would not win back.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn
from transformers.cache_utils import Cache, CacheLayerMixin

from .sentscore_search import (
    SentFormat,
    SentScoreOutput,
    _BeamSearch,
    _Decoder,
    _note_nan,
    _refuse_too_long,
    _self_attention_layers,
    context_limit,
    encode_prompts,
)
from .sentscore_search import sentscore as _sentscore
from .shared_prefix import NAME as SHARED_PREFIX_ATTENTION

MASKS = {"sdpa": "bool", SHARED_PREFIX_ATTENTION: "bool", "eager": "additive"}


def sentscore(
    model,
    fmt: SentFormat,
    batch_words: list[list[str]],
    k: int = 1,
    share_context: bool = True,
    static: bool | None = None,
    compile_steps: bool = False,
) -> SentScoreOutput:
    """SenTScore (:func:`sentscore_search.sentscore`) by the static search where ``static``, or, when
    None, on a CUDA device where the model allows it (:func:`supports_static`); else by the dynamic
    one. ``compile_steps``: the static search's decoder calls compiled. What teachers call."""
    can = supports_static(model)
    if static and not can:
        raise ValueError(
            "SenTScore's static search needs a decoder-only LM with sdpa or eager attention, not "
            f"{type(model).__name__} with {getattr(model.config, '_attn_implementation', None)!r}: pass static=False"
        )
    if static is None:
        static = can and next(model.parameters()).device.type == "cuda"
    search = functools.partial(StaticBeamSearch, compile_steps=compile_steps) if static else None
    return _sentscore(model, fmt, batch_words, k=k, share_context=share_context, search_class=search)


def supports_static(model) -> bool:
    """Whether :class:`StaticBeamSearch` can run ``model``: a decoder-only LM whose attention takes a
    4-D mask of a known kind (module docstring)."""
    causal = not getattr(model.config, "is_encoder_decoder", False)
    return causal and getattr(model.config, "_attn_implementation", None) in MASKS


class ColumnLayer(CacheLayerMixin):
    """One layer's keys and values ``[R, H, W, D]``, allocated at the first write; a call writes
    its tokens at the columns ``column, column + 1, ...`` (``column``: a 0-d tensor on the device
    that the search moves, shared by every layer) and attends over the whole buffer."""

    is_compileable, is_sliding = True, False

    def __init__(self, width: int, column: Tensor):
        super().__init__()
        self.width, self.column = width, column

    def lazy_initialization(self, key_states: Tensor, value_states: Tensor) -> None:
        R, H, _, D = key_states.shape
        self.place(
            key_states.new_zeros(R, H, self.width, D), value_states.new_zeros(R, H, self.width, value_states.shape[-1])
        )
        self.is_initialized = True

    def update(self, key_states: Tensor, value_states: Tensor, *args, **kwargs) -> tuple[Tensor, Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        cols = self.column + torch.arange(key_states.shape[-2], device=key_states.device)
        self.keys.index_copy_(2, cols, key_states)
        self.values.index_copy_(2, cols, value_states)
        return self.keys, self.values

    def place(self, keys: Tensor, values: Tensor) -> None:
        """New buffers (the prompt's, repeated for the beams); their addresses stay from here on."""
        self.keys, self.values = keys, values
        if keys.is_cuda:  # fixed addresses: CUDA graphs replay over them
            torch._dynamo.mark_static_address(self.keys)
            torch._dynamo.mark_static_address(self.values)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.width, 0

    def get_seq_length(self) -> int:  # positions are explicit: the search never asks transformers to count
        return 0

    def get_max_length(self) -> int:
        return self.width


def column_cache(model, width: int, column: Tensor):
    """A transformers ``Cache`` of :class:`ColumnLayer` s, one per decoder layer."""
    n = model.config.get_text_config(decoder=True).num_hidden_layers
    return Cache(layers=[ColumnLayer(width, column) for _ in range(n)])


class StaticBeamSearch(_BeamSearch):
    """:class:`_BeamSearch`'s steps over a static cache (module docstring). Rows are sentence-major
    (``B * k``), sentences sorted longest first, as there."""

    def __init__(self, model, fmt, words: list[list[str]], k: int, after_context: bool = False, compile_steps=False):
        device = self.device = next(model.parameters()).device
        self.fmt, self.k, self.causal = fmt, k, True
        B, L = len(words), len(words[0])
        _refuse_too_long(fmt, words, context_limit(model))
        self.dec = _Decoder(model)
        self._start(B, L)
        self.additive = MASKS[model.config._attn_implementation] == "additive"

        prompt, prompt_mask = encode_prompts(fmt, words, device, after_context=after_context)
        self.P = prompt.shape[1]
        self.width = self.P + L * (self.C + 1)
        self.column = torch.zeros((), dtype=torch.long, device=device)
        if self.column.is_cuda:
            torch._dynamo.mark_static_address(self.column)
        self.cache = column_cache(model, self.width, self.column)
        self.cols = torch.arange(self.width, device=device)
        self.filled = nn.functional.pad(prompt_mask.bool(), (0, self.width - self.P))  # [B, W] columns holding a token
        before = len(fmt.context) if after_context else 0
        positions = before + (prompt_mask.cumsum(1) - 1).clamp(min=0)
        states = self._call(prompt, positions, 0, self.filled, step=False)
        self.last = torch.log_softmax(self.dec.project(states[:, -1]), -1).repeat_interleave(k, 0)  # [R, V]
        for layer in _self_attention_layers(self.cache):  # K beams per sentence: the prompt's states repeated
            layer.place(*(x.repeat_interleave(k, 0) for x in (layer.keys, layer.values)))
        self.filled = self.filled.repeat_interleave(k, 0)
        self.n_real = (prompt_mask.sum(1) + before).repeat_interleave(k)
        self.rows = torch.arange(B, device=device).repeat_interleave(k)
        self.step_call = (
            torch.compile(self._forward, mode=_compile_mode(device), dynamic=True) if compile_steps else self._forward
        )
        self.R = B * k

    def _mask(self, visible: Tensor, start: int, m: int) -> Tensor:
        """``[R, 1, m, W]``: query ``j``, at column ``start + j``, sees the ``visible [R, W]`` columns
        up to its own, and its own (a padding token of the prompt sees itself: no empty row)."""
        q = start + torch.arange(m, device=self.device)[:, None]
        seen = (visible[:, None, :] & (self.cols <= q)) | (self.cols == q)
        seen = seen[:, None]
        if self.additive:
            return torch.zeros(seen.shape, device=self.device).masked_fill(~seen, torch.finfo(torch.float32).min)
        return seen

    def _forward(self, ids: Tensor, positions: Tensor, mask: Tensor) -> Tensor:
        """One decoder call over the static cache (the output projection left out, ``_Decoder``)."""
        dec = self.dec
        out = dec.model(
            **{dec.cache_arg: self.cache}, input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True
        )
        return out.logits

    def _call(self, ids: Tensor, positions: Tensor, start: int, visible: Tensor, step: bool = True) -> Tensor:
        """The states of ``ids [R, m]`` written at columns ``start ..``, seeing ``visible``."""
        self.column.fill_(start)
        mask = self._mask(visible, start, ids.shape[1])
        with self.dec.without_head():  # as in _Decoder: the projection at the scored positions only
            if not step or self.step_call is self._forward:
                return self._forward(ids, positions, mask)
            # a CUDA graph's outputs are overwritten by its next replay: the states are copied out
            return self.step_call(ids, positions, mask).clone()

    def _own(self, start: int, m: int) -> Tensor:
        """The filled columns and a call's own ``start .. start + m - 1``."""
        return self.filled | ((self.cols >= start) & (self.cols < start + m))

    def drop_finished(self, n: int) -> None:
        """The first ``n`` sentences are live; the others keep their rows until half the rows have
        ended, then leave (module docstring)."""
        self.live = n
        keep = n * self.k
        if keep <= self.R // 2:
            for layer in _self_attention_layers(self.cache):
                layer.place(layer.keys[:keep].clone(), layer.values[:keep].clone())
            self.filled, self.n_real, self.last, self.rows = (
                x[:keep] for x in (self.filled, self.n_real, self.last, self.rows)
            )
            self.R = keep

    def _block(self, i: int) -> int:
        """The first column of word ``i``'s tag block; its sentinel is at ``+ C``."""
        return self.P + (i - 1) * (self.C + 1)

    def score_tags(self, i: int) -> tuple[Tensor, list]:
        """eq. 1 for every row and tag ``[R, |T̄|]`` (the live rows first), and each tag's block of
        keys and values per layer, written at word ``i``'s block in turn."""
        R, fmt, start = self.R, self.fmt, self._block(i)
        step = torch.empty(R, len(fmt.tags), device=self.device)
        blocks, scored, targets = [], [], []
        for t, tokens in enumerate(self.tag_tokens):
            m = self.tag_lens[t]
            ids = tokens.expand(R, -1)
            positions = self.n_real[:, None] + torch.arange(m, device=self.device)
            states = self._call(ids, positions, start, self._own(start, m))
            self._scored(step, t, ids, states, i, scored, targets)
            blocks.append(
                [
                    (layer.keys[..., start : start + m, :].clone(), layer.values[..., start : start + m, :].clone())
                    for layer in _self_attention_layers(self.cache)
                ]
            )
        self._project_scored(step, scored, targets)
        live = self.live * self.k
        step[:live] = _note_nan(step[:live], self.first_nan, self.live, self.k, i)
        return step[:live], (blocks, start)

    def keep(self, src: Tensor, tag: Tensor, blocks) -> None:
        """Each kept beam's row, with its chosen tag's block written at word ``i``'s columns (the rest
        of the block left empty); the ended sentences' rows stay as they are."""
        blocks, start = blocks
        device, C, live = self.device, self.C, self.live * self.k
        take = torch.cat(
            [
                (torch.arange(self.live, device=device)[:, None] * self.k + src).reshape(-1),
                torch.arange(live, self.R, device=device),
            ]
        )
        chosen = torch.cat([tag.reshape(-1), tag.new_zeros(self.R - live)])
        used = self.tag_len[chosen]
        used[live:] = 0  # the ended sentences' positions stay where they ended (an absolute table's range)
        self.filled = self.filled[take]
        self.filled[:, start : start + C] = torch.arange(C, device=device)[None] < used[:, None]
        for j, layer in enumerate(_self_attention_layers(self.cache)):
            for attr, which in (("keys", 0), ("values", 1)):
                buffer = getattr(layer, attr)
                block = self._chosen_blocks(blocks, j, which, chosen, take)
                buffer.copy_(buffer[take])  # in place: the buffer keeps its address
                buffer[:, :, start : start + C] = block
        self.n_real = self.n_real[take] + used

    def feed_sentinel(self, i: int) -> None:
        """s_i after every row's chosen tag, at the block's last column."""
        at = self._block(i) + self.C
        ids = torch.full((self.R, 1), self.fmt.sentinels[i], dtype=torch.long, device=self.device)
        states = self._call(ids, self.n_real[:, None], at, self._own(at, 1))
        self.filled[:, at] = True
        self.last = torch.log_softmax(self.dec.project(states[:, -1]), -1)
        self.n_real[: self.live * self.k] += 1


def _compile_mode(device: torch.device) -> str:
    """CUDA graphs on a GPU (``reduce-overhead``); plain compiled kernels elsewhere."""
    return "reduce-overhead" if device.type == "cuda" else "default"
