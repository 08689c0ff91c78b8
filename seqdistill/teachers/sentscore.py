"""SenTScore (paper 004): an encoder-decoder model as a tagger that cannot hallucinate.

**SenT' format** (§4.1, Table 1). Words x_1..x_L and sentinel tokens s_0..s_L:

    input   s_0 x_1 s_1 x_2 ... s_{L-1} x_L s_L
    target  s_0 t_1 s_1 t_2 ... s_{L-1} t_L s_L

with t_i in the sBIO tag set T u {I, O} (a type tag starts a span, ``I`` continues one). Sentinels
are the model's own extra ids (``<extra_id_n>``, T5-style) or reserved tokens (``[unusedN]``, BERT
vocabularies); each tag string is tokenized once.

**SenTScore** (Algorithm 1). At step i every beam is extended by every tag t with the string
"t s_i"; its score is the decoder's log-likelihood of those tokens given the beam (eq. 1: the next
sentinel acts as an end-of-tag mark, so a tag that is a prefix of another is not favoured). The
top-K extensions over (beam, tag) are kept, and each kept beam records the scores of all |T̄|
tags at that step: the per-word tag-score distribution used for distillation (eq. 2).

Batched over sentences, beams and tags at once with the decoder's key/value cache: one decoder
call per step scores the B·K·|T̄| candidates (right-padded to the longest tag), and the cache rows
of the kept candidates are selected and *right-aligned* (their padding rolled to the left and
masked out), so every sequence in the batch stays left-padded and gap-free. Relative position
biases (T5) see the true distances; decoders with absolute positions (BERT in an
``EncoderDecoderModel``) are given explicit position ids. Invalid sBIO continuations (``I`` first
or after ``O``) get -inf, so every output is a valid tag sequence of the input's length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

SBIO_INSIDE, SBIO_OUTSIDE = "I", "O"


def sbio_tags(entity_types) -> tuple[str, ...]:
    """T̄ = T u {I, O}, in a fixed order: O, I, then the entity types sorted."""
    return (SBIO_OUTSIDE, SBIO_INSIDE, *sorted(entity_types))


class SentFormat:
    """The SenT' format for one tokenizer and one sBIO tag set."""

    def __init__(self, tokenizer, tags, max_words: int | None = None):
        self.tokenizer, self.tags = tokenizer, tuple(tags)
        if self.tags[:2] != (SBIO_OUTSIDE, SBIO_INSIDE):
            raise ValueError(f"sBIO tags must start with O, I; got {self.tags}")
        self.sentinels = _sentinel_ids(tokenizer)
        if max_words is not None:
            self.sentinels = self.sentinels[: max_words + 1]
        self.tag_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in self.tags]
        self.prefix, self.suffix = _special_wrap(tokenizer)
        for t, ids in zip(self.tags, self.tag_ids):
            if not ids:
                raise ValueError(f"tag {t!r} tokenizes to nothing with this tokenizer")

    @property
    def max_words(self) -> int:
        return len(self.sentinels) - 1

    def _check(self, words: list[str]) -> None:
        if not 0 < len(words) <= self.max_words:
            raise ValueError(f"a sentence of {len(words)} words; SenT' needs 1 to {self.max_words} "
                             f"(one sentinel per word, plus one)")

    def encode_input(self, words: list[str]) -> list[int]:
        """s_0 x_1 s_1 ... x_L s_L, with the model's special tokens around it."""
        self._check(words)
        ids = [self.sentinels[0]]
        for i, w in enumerate(words, 1):
            ids += self.tokenizer(w, add_special_tokens=False)["input_ids"] or [self.tokenizer.unk_token_id]
            ids.append(self.sentinels[i])
        return self.prefix + ids + self.suffix

    def encode_target(self, tags: list[str]) -> list[int]:
        """s_0 t_1 s_1 ... t_L s_L, then the end-of-sequence token when the tokenizer has one."""
        self._check(tags)
        index = {t: i for i, t in enumerate(self.tags)}
        ids = [self.sentinels[0]]
        for i, t in enumerate(tags, 1):
            if t not in index:
                raise ValueError(f"tag {t!r} is not in the sBIO tag set {self.tags}")
            ids += self.tag_ids[index[t]] + [self.sentinels[i]]
        eos = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else self.tokenizer.sep_token_id
        return ids + ([eos] if eos is not None else [])

    def allowed(self) -> tuple[Tensor, Tensor]:
        """sBIO constraints: ``start [T̄]`` (I may not start) and ``after [T̄, T̄]`` (I may not follow O)."""
        n = len(self.tags)
        start = torch.ones(n, dtype=torch.bool)
        start[1] = False
        after = torch.ones(n, n, dtype=torch.bool)
        after[0, 1] = False
        return start, after


def _special_wrap(tokenizer) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a text ([CLS] .. [SEP], .. </s>)."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a")["input_ids"]
    for i in range(len(full) - len(plain) + 1):
        if full[i: i + len(plain)] == plain:
            return full[:i], full[i + len(plain):]
    return [], []


def _sentinel_ids(tokenizer) -> list[int]:
    vocab = tokenizer.get_vocab()
    for pattern in ("<extra_id_{}>", "[unused{}]"):
        ids = []
        while pattern.format(len(ids)) in vocab:
            ids.append(vocab[pattern.format(len(ids))])
        if len(ids) >= 2:
            return ids
    raise ValueError("the tokenizer has no sentinel tokens: SenT' needs <extra_id_N> (T5-style) or [unusedN] "
                     "(BERT vocabularies)")


@dataclass
class SentScoreOutput:
    tags: Tensor  # [B, K, L] tag indices into SentFormat.tags (-1 past the sentence), best beam first
    beam_scores: Tensor  # [B, K] total log-likelihood of each beam (-inf for beams that do not exist)
    tag_scores: Tensor  # [B, K, L, T̄] log-likelihood of "t s_i" at each step of each beam, -inf where t is invalid


def _decoder_start(model) -> int:
    cfg = model.config
    start = getattr(cfg, "decoder_start_token_id", None)
    if start is None and hasattr(model, "generation_config"):
        start = model.generation_config.decoder_start_token_id
    if start is None:
        raise ValueError("the model's config has no decoder_start_token_id")
    return int(start)


def encode_batch(fmt: SentFormat, batch_words: list[list[str]], device) -> tuple[Tensor, Tensor]:
    seqs = [fmt.encode_input(w) for w in batch_words]
    S = max(len(s) for s in seqs)
    pad = fmt.tokenizer.pad_token_id or 0
    ids = torch.full((len(seqs), S), pad, dtype=torch.long)
    mask = torch.zeros(len(seqs), S, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s)
        mask[b, : len(s)] = 1
    return ids.to(device), mask.to(device)


class _Decoder:
    """The decoder over left-padded, gap-free rows with a key/value cache."""

    def __init__(self, model, enc_h: Tensor, enc_mask: Tensor):
        self.model, self.enc_h, self.enc_mask = model, enc_h, enc_mask
        self.absolute = model.config.model_type == "encoder-decoder"  # BERT-style decoder: explicit positions

    def __call__(self, rows: Tensor, ids: Tensor, mask: Tensor, cache, n_real: Tensor):
        """Decoder logits for ``ids [R, C]`` after ``cache`` (rows ``R``, of sentences ``rows``);
        ``mask [R, past + C]``; ``n_real [R]`` real tokens before ``ids``."""
        kwargs = {}
        if self.absolute:
            kwargs["decoder_position_ids"] = n_real[:, None] + torch.arange(ids.shape[1], device=ids.device)
        from transformers.modeling_outputs import BaseModelOutput

        out = self.model(encoder_outputs=BaseModelOutput(last_hidden_state=self.enc_h[rows]),
                         attention_mask=self.enc_mask[rows], decoder_input_ids=ids, decoder_attention_mask=mask,
                         past_key_values=cache, use_cache=True, **kwargs)
        return torch.log_softmax(out.logits.float(), dim=-1), out.past_key_values


def _self_attention_layers(cache):
    inner = getattr(cache, "self_attention_cache", cache)
    return inner.layers


@torch.inference_mode()
def sentscore(model, fmt: SentFormat, batch_words: list[list[str]], k: int = 1) -> SentScoreOutput:
    """Algorithm 1 over a batch of sentences, batched over sentences, beams and tags."""
    device = next(model.parameters()).device
    B, n_t = len(batch_words), len(fmt.tags)
    lengths = torch.tensor([len(w) for w in batch_words], device=device)
    L = int(lengths.max())
    enc_ids, enc_mask = encode_batch(fmt, batch_words, device)
    enc_h = model.get_encoder()(input_ids=enc_ids, attention_mask=enc_mask).last_hidden_state
    dec = _Decoder(model, enc_h, enc_mask)

    # candidate token blocks "t s_i": [T̄, C] right-padded, with their lengths
    C = max(len(t) for t in fmt.tag_ids) + 1
    tag_tok = torch.zeros(n_t, C, dtype=torch.long, device=device)
    for t, ids in enumerate(fmt.tag_ids):
        tag_tok[t, : len(ids)] = torch.tensor(ids)
    tag_len = torch.tensor([len(t) + 1 for t in fmt.tag_ids], device=device)
    start_ok, after_ok = (x.to(device) for x in fmt.allowed())

    # prefix [decoder start, s_0] for every sentence, then K beams per sentence
    prefix = torch.tensor([_decoder_start(model), fmt.sentinels[0]], device=device).expand(B, 2)
    rows = torch.arange(B, device=device)
    logp, cache = dec(rows, prefix, torch.ones(B, 2, dtype=torch.long, device=device), None,
                      torch.zeros(B, dtype=torch.long, device=device))
    last = logp[:, -1].repeat_interleave(k, 0)  # [B*K, V]: next-token log-probs after each beam
    cache.batch_repeat_interleave(k)
    rows = rows.repeat_interleave(k)
    mask = torch.ones(B * k, 2, dtype=torch.long, device=device)
    n_real = torch.full((B * k,), 2, dtype=torch.long, device=device)
    beam = torch.full((B, k), float("-inf"), device=device)
    beam[:, 0] = 0.0  # at the start all beams are the same: keep one
    prev_tag = torch.full((B, k), -1, dtype=torch.long, device=device)
    tags = torch.full((B, k, L), -1, dtype=torch.long, device=device)
    scores = torch.full((B, k, L, n_t), float("-inf"), device=device)
    sentinels = torch.tensor(fmt.sentinels, device=device)

    for i in range(1, L + 1):
        live = lengths >= i  # [B]
        R = B * k
        # score every candidate "t s_i" of every beam in one decoder call
        block = tag_tok.clone()
        block[torch.arange(n_t, device=device), tag_len - 1] = sentinels[i]
        ids = block.repeat(R, 1)  # [R*T̄, C]
        cache.batch_repeat_interleave(n_t)
        cand_mask = torch.cat([mask.repeat_interleave(n_t, 0), torch.ones(R * n_t, C, dtype=torch.long, device=device)], 1)
        logp, cache = dec(rows.repeat_interleave(n_t), ids, cand_mask, cache, n_real.repeat_interleave(n_t))
        # log p(token_0 | beam) + sum_j log p(token_j | beam, tokens_<j), over each candidate's real tokens
        first = last.repeat_interleave(n_t, 0).gather(1, ids[:, :1]).squeeze(1)
        rest = logp[:, :-1].gather(2, ids[:, 1:].unsqueeze(-1)).squeeze(-1)  # [R*T̄, C-1]
        real = torch.arange(1, C, device=device)[None] < tag_len.repeat(R)[:, None]
        step = (first + (rest * real).sum(1)).view(B, k, n_t)  # eq. 1 scores
        ok = torch.where(prev_tag[..., None] < 0, start_ok.expand(B, k, n_t),
                         after_ok[prev_tag.clamp(min=0)])
        step = step.masked_fill(~ok, float("-inf"))  # constrained: an invalid tag scores -inf
        total = beam[..., None] + step
        top, arg = total.view(B, k * n_t).topk(k, dim=1)
        src_beam, tag = arg // n_t, arg % n_t
        # finished sentences keep their beams: they take an all-padding block
        src_beam = torch.where(live[:, None], src_beam, torch.arange(k, device=device).expand(B, k))
        new_beam = torch.where(live[:, None], top, beam)
        take = torch.arange(B, device=device)[:, None] * k + src_beam  # [B, K] source rows
        tags = tags.gather(1, src_beam[..., None].expand(-1, -1, L)).clone()
        tags[:, :, i - 1] = torch.where(live[:, None], tag, tags[:, :, i - 1])
        scores = scores.gather(1, src_beam[..., None, None].expand(-1, -1, L, n_t)).clone()
        scores[:, :, i - 1] = torch.where(live[:, None, None], step.gather(1, src_beam[..., None].expand(-1, -1, n_t)),
                                          scores[:, :, i - 1])
        # the kept candidates' cache rows, right-aligned
        chosen = take.reshape(-1) * n_t + torch.where(live[:, None], tag, 0).reshape(-1)  # rows of the candidate run
        used = torch.where(live[:, None], tag_len[tag], 0).reshape(-1)  # real tokens appended per beam
        cache.batch_select_indices(chosen)
        shift = C - used  # padding to roll to the left
        width = mask.shape[1] + C
        index = (torch.arange(width, device=device)[None] - shift[:, None]) % width  # [R, width]
        for layer in _self_attention_layers(cache):
            g = index[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
            layer.keys, layer.values = layer.keys.gather(2, g), layer.values.gather(2, g)
        new_mask = torch.cat([mask[take.reshape(-1)], (torch.arange(C, device=device)[None] < used[:, None]).long()], 1)
        mask = new_mask.gather(1, index)
        last_pos = (used - 1).clamp(min=0)
        last = torch.where(live.repeat_interleave(k)[:, None], logp[chosen, last_pos], last[take.reshape(-1)])
        n_real = n_real[take.reshape(-1)] + used
        prev_tag = torch.where(live[:, None], tag, prev_tag.gather(1, src_beam))
        beam = new_beam
    past = torch.arange(L, device=device)[None, None] >= lengths[:, None, None]
    tags = tags.masked_fill(past, -1)
    scores = scores.masked_fill(past[..., None], float("-inf"))
    return SentScoreOutput(tags, beam, scores)


@torch.inference_mode()
def sentscore_one_at_a_time(model, fmt: SentFormat, words: list[str]) -> tuple[list[int], list[list[float]]]:
    """Greedy SenTScore for one sentence, scoring each candidate "t s_i" by a full decoder pass over
    prefix + candidate (no cache, no batching): the reference for tests and the baseline of the
    benchmark. Returns the tag indices and the per-step scores of every tag."""
    device = next(model.parameters()).device
    enc_ids, enc_mask = encode_batch(fmt, [words], device)
    enc_h = model.get_encoder()(input_ids=enc_ids, attention_mask=enc_mask).last_hidden_state
    from transformers.modeling_outputs import BaseModelOutput

    start_ok, after_ok = fmt.allowed()
    prefix = [_decoder_start(model), fmt.sentinels[0]]
    chosen, all_scores = [], []
    for i in range(1, len(words) + 1):
        step = []
        for t, tag_ids in enumerate(fmt.tag_ids):
            ok = bool(start_ok[t]) if not chosen else bool(after_ok[chosen[-1], t])
            cont = tag_ids + [fmt.sentinels[i]]
            ids = torch.tensor([prefix + cont], device=device)
            out = model(encoder_outputs=BaseModelOutput(last_hidden_state=enc_h), attention_mask=enc_mask,
                        decoder_input_ids=ids)
            logp = torch.log_softmax(out.logits.float(), dim=-1)[0]
            s = sum(logp[len(prefix) - 1 + j, tok].item() for j, tok in enumerate(cont))
            step.append(s if ok else float("-inf"))
        best = max(range(len(step)), key=step.__getitem__)
        chosen.append(best)
        all_scores.append(step)
        prefix += fmt.tag_ids[best] + [fmt.sentinels[i]]
    return chosen, all_scores
