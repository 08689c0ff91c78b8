"""The ``sentscore`` teacher kind (paper 004): a generative model read with SenTScore (the
tag-wise beam search of ``teachers/sentscore_search.py``).

:class:`SentScoreTeacher` has the teacher interface of ``encoder.Teacher`` (kind ``sentscore``, label
schema, fingerprints, ``predict``, ``outputs``, ``save``), over one of:

* an ``AutoModelForSeq2SeqLM`` whose vocabulary has sentinels (T5, mT5, Flan-T5);
* an ``EncoderDecoderModel`` built from an encoder for both halves (offline: MiniLM);
* a decoder-only ``AutoModelForCausalLM`` (Gemma 3, Llama, Qwen2, GPT-2... issue 35), the SenT'
  input as its prompt and the target after it.

Which one is read from the model's config (:func:`architecture`); students and the cache see no
difference. Its label schema is sBIO over the corpus's entity types.

Decisions, named here:

* Training is teacher forcing with the language-modelling loss on SenT' targets (§4.1: "the
  finetuning objective is still the original language modelling one").
* A sentence longer than the model allows is split into consecutive pieces, each decoded (and
  trained, and scored for the gold NLL) on its own; beam j of the sentence is beam j of every piece
  (scores added). The limit is the sentinels (99 words with T5's 100 extra ids) and, for decoders
  with absolute positions (BERT), the position table: a piece's SenT' input and output must both
  fit. For a causal LM, prompt and target together must fit its position table and, with
  sliding-window attention, its window less one. An entity across a piece boundary is cut in two.
* A causal LM's loss and gold NLL apply the output projection at the target positions only: a
  262k-token vocabulary's logits over every position of a batch (prompts included, which carry no
  loss) were most of a Gemma 3 270M training step's time and gigabytes of memory. The loss is the
  mean over target tokens, as transformers' own.
* ``outputs`` returns, as ``logits``, the per-word tag scores of the best beam (log-likelihood of
  "t s_i", -inf on tags the sBIO constraints forbid): paper 004's u*_i, softmaxed at a temperature
  by the student.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from ...cache_schema import FieldSpec, LabelSchema
from ..base import TeacherError, TeacherOutput, inference_autocast, teacher_fingerprints, write_teacher_json
from ..kind import TeacherKind
from ..pretrained import base_record, from_pretrained, save_model
from ..sentscore_search import (
    SentFormat,
    context_limit,
    encode_batch,
    encode_sequences,
    is_causal,
    output_head,
    project,
    without_sliding_window,
)
from ..sentscore_static import sentscore  # the static search on a GPU, the dynamic one elsewhere


class SentScoreTeacher(nn.Module):
    kind = "sentscore"
    pooling = "first"
    pretrained_attr = "model"  # what LoRA adapts (adapters.py): the whole generative model

    def __init__(self, model: nn.Module, tokenizer, schema: LabelSchema, k: int = 1):
        super().__init__()
        if schema.scheme != "sBIO":
            raise ValueError(f"a SenTScore teacher tags in sBIO, not {schema.scheme}: convert the label schema")
        self.model, self.tokenizer, self.schema, self.k = model, tokenizer, schema, k
        self.format = SentFormat(tokenizer, schema.tags)
        self.causal = is_causal(model)
        self.source_dir: Path | None = None
        self.base: dict | None = None  # the GGUF file it was built from (teachers/pretrained.py)
        self.in_context: dict | None = None  # an in-context teacher's model and demonstrations (in_context.py)
        self.demonstrations: list[tuple[list[str], list[str]]] = []

    def set_demonstrations(self, demonstrations: list[tuple[list[str], list[str]]]) -> None:
        """Words and sBIO tags of each demonstration, put before every prompt (in_context.py)."""
        self.demonstrations = [(list(w), list(t)) for w, t in demonstrations]
        self.format.set_demonstrations(self.demonstrations)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def encoder(self) -> nn.Module:
        """The encoder half, or a causal LM's decoder stack (their input embeddings are what
        students are given)."""
        return self.model.get_decoder() if self.causal else self.model.get_encoder()

    @property
    def num_layers(self) -> int:
        cfg = self.encoder.config
        return int(getattr(cfg, "num_hidden_layers", None) or cfg.num_layers)

    # -- training -------------------------------------------------------------------------------
    def loss(self, batch_words: list[list[str]], tags: Tensor) -> Tensor:
        """Mean token-level language-modelling loss of the SenT' targets (teacher forcing; a causal
        LM's loss is on the target tokens only)."""
        words, piece_tags, _ = self._split(batch_words, tags)
        if self.causal:  # the vocabulary projection at the target positions only (module docstring)
            ids, mask, labels = self._sequences(words, piece_tags)
            return -_causal_target_log_likelihood(self.model, ids, mask, labels).sum() / (labels[:, 1:] >= 0).sum()
        enc_ids, enc_mask = encode_batch(self.format, words, self.device)
        labels = self._labels(words, piece_tags).to(self.device)
        return self.model(input_ids=enc_ids, attention_mask=enc_mask, labels=labels).loss

    def _sequences(self, words, piece_tags: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Causal LMs: prompt + target of each piece, on the device (``ids, mask, labels``)."""
        tags = [self.schema.decode(piece_tags[b, : len(w)].tolist()) for b, w in enumerate(words)]
        return tuple(x.to(self.device) for x in encode_sequences(self.format, words, tags))

    def _split(self, batch_words, tags: Tensor) -> tuple[list[list[str]], Tensor, list[int]]:
        """Sentences and their tag ids ``[B, W]`` cut into the pieces the model takes whole, with
        the sentence of each piece."""
        words, owner = self._pieces(batch_words)
        offset, rows = [0] * len(batch_words), []
        for w, b in zip(words, owner):
            rows.append(tags[b, offset[b] : offset[b] + len(w)])
            offset[b] += len(w)
        out = torch.full((len(rows), max(len(r) for r in rows)), -1, dtype=torch.long)
        for i, r in enumerate(rows):
            out[i, : len(r)] = r
        return words, out, owner

    def _labels(self, batch_words, tags: Tensor) -> Tensor:
        """SenT' targets ``[B, T]``, -100 on padding (ignored by the loss)."""
        targets = [
            self.format.encode_target(self.schema.decode(tags[b, : len(w)].tolist())) for b, w in enumerate(batch_words)
        ]
        labels = torch.full((len(targets), max(len(t) for t in targets)), -100, dtype=torch.long)
        for b, t in enumerate(targets):
            labels[b, : len(t)] = torch.tensor(t)
        return labels

    # -- inference ------------------------------------------------------------------------------
    def _positions(self) -> int | None:
        """Positions of an absolute-position model (encoder and decoder alike), or tokens of a causal
        LM's one sequence (its position table; with sliding-window attention, the window less one);
        None if relative."""
        cfg = self.model.config
        if self.causal:
            return context_limit(self.model)
        if cfg.model_type != "encoder-decoder":
            return None
        return min(cfg.encoder.max_position_embeddings, cfg.decoder.max_position_embeddings)

    def _spans(self, words: list[str]) -> list[tuple[int, int]]:
        """Consecutive [start, end) pieces of a sentence that the model can take whole."""
        n = self.format.max_words
        limit = self._positions()
        if limit is None:  # relative positions: only the sentinels bound a piece
            return [(s, min(s + n, len(words))) for s in range(0, len(words), n)]
        longest_tag = self.format.tag_block
        fixed = len(self.format.prefix) + len(self.format.suffix) + 1
        spans, start, enc, dec = [], 0, 0, 0
        for i, w in enumerate(words):
            cost = self.format.word_tokens(w)
            if self.causal:  # one sequence: SentFormat.causal_tokens(words[start : i + 1]), summed as it goes
                full = i - start >= n or self.format.causal_overhead + enc + cost + dec + longest_tag > limit
            else:
                full = i - start >= n or enc + cost + fixed > limit or dec + longest_tag + 3 > limit
            if full and i > start:
                spans.append((start, i))
                start, enc, dec = i, 0, 0
            enc, dec = enc + cost, dec + longest_tag
        spans.append((start, len(words)))
        return spans

    def _pieces(self, batch_words):
        pieces, owner = [], []
        for b, words in enumerate(batch_words):
            for s, e in self._spans(words):
                pieces.append(words[s:e])
                owner.append(b)
        return pieces, owner

    @torch.no_grad()
    def decode_batch(self, batch_words: list[list[str]], k: int | None = None):
        """SenTScore over a batch: ``(paths [B, K, W], beam scores [B, K], tag scores [B, W, T̄])``."""
        k = k or self.k
        pieces, owner = self._pieces(batch_words)
        out = sentscore(self.model, self.format, pieces, k=k)
        # to the host once (three copies), not three a piece: on a GPU each copy waits for the device
        tags, beam, best = (x.cpu() for x in (out.tags, out.beam_scores, out.tag_scores[:, 0]))
        B, W, T = len(batch_words), max(len(w) for w in batch_words), len(self.schema.tags)
        paths = torch.full((B, k, W), -1, dtype=torch.long)
        beams = torch.zeros(B, k)
        scores = torch.full((B, W, T), float("-inf"))
        offset = [0] * B
        for p, (b, words) in enumerate(zip(owner, pieces)):
            n, o = len(words), offset[b]
            paths[b, :, o : o + n] = tags[p, :, :n]
            beams[b] += beam[p]
            scores[b, o : o + n] = best[p, :n]
            offset[b] += n
        paths[torch.isinf(beams)] = -1
        return paths, beams, scores

    @torch.no_grad()
    def predict(self, batch_words: list[list[str]]) -> list[list[str]]:
        paths, _, _ = self.decode_batch(batch_words, k=1)
        return [self.schema.decode(paths[b, 0, : len(w)].tolist()) for b, w in enumerate(batch_words)]

    def prepare(self, batch_words: list[list[str]]) -> None:
        """Nothing is made ahead of the device: the search encodes its own prompts."""
        return None

    def outputs(
        self,
        batch_words,
        tags: Tensor | None = None,
        *,
        k: int | None = None,
        hidden_layers=(),
        precision: str | None = "auto",
        **_,
    ):
        """What a cache stores for this teacher: k-best sBIO paths, their scores, per-word tag
        scores of the best beam, and the LM loss of the gold target on labelled rows. The model
        runs under ``precision`` autocast (``base.resolve_precision``: auto is bf16 on GPU and fp32
        on CPU, as for every teacher); scores are summed in fp32 either way."""
        if hidden_layers:
            raise ValueError("a SenTScore teacher stores no hidden layers; leave --hidden-layers out")
        self.model.eval()
        with torch.inference_mode(), inference_autocast(self.device, precision):
            paths, beams, scores = self.decode_batch(batch_words, k)
            W = paths.shape[-1]
            mask = torch.arange(W)[None] < torch.tensor([len(w) for w in batch_words])[:, None]
            out = TeacherOutput(mask, scores, kbest_paths=paths, kbest_log_probs=beams)
            if tags is not None:
                out.gold_nll = self.gold_nll(batch_words, tags)
        return out

    def gold_nll(self, batch_words: list[list[str]], tags: Tensor) -> Tensor:
        """Negative log-likelihood of each gold SenT' target (NaN on rows without gold tags)."""
        rows = [b for b in range(len(batch_words)) if tags[b, 0] >= 0]
        nll = torch.full((len(batch_words),), float("nan"))
        if rows:
            words, piece_tags, piece_row = self._split([batch_words[b] for b in rows], tags[rows])
            owner = [rows[j] for j in piece_row]
            if self.causal:
                ids, mask, labels = self._sequences(words, piece_tags)
                per_piece = -_causal_target_log_likelihood(self.model, ids, mask, labels).cpu()
            else:
                enc_ids, enc_mask = encode_batch(self.format, words, self.device)
                labels = self._labels(words, piece_tags).to(self.device)
                logits = self.model(input_ids=enc_ids, attention_mask=enc_mask, labels=labels).logits
                logp = torch.log_softmax(logits.float(), -1).gather(2, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
                per_piece = -(logp * (labels >= 0)).sum(1).cpu()
            nll[rows] = 0.0
            nll.index_add_(0, torch.tensor(owner), per_piece)
        return nll

    # -- decoding and export ----------------------------------------------------------------------
    def decoder(self) -> None:
        """None: the teacher decodes itself (the beam search, ``predict``), with no word scores."""
        return None

    def export_graph(self):
        raise TeacherError(
            f"{self.source_dir}: a SenTScore teacher is a generative model read by beam search, "
            "not a tagger graph; distil it into a student (`distill-train --recipe sentscore`) "
            "and export the student"
        )

    def export_head(self, directory: Path) -> None:
        """Nothing beyond the encoder's embeddings."""

    # -- identity and persistence ---------------------------------------------------------------
    def fingerprints(self) -> dict[str, str]:
        if self.source_dir is None:
            raise ValueError("this teacher was not loaded from a directory: save it first")
        return teacher_fingerprints(self.source_dir)

    def save(self, directory) -> Path:
        """The teacher directory: weights, tokenizer and ``teacher.json``; for an in-context teacher,
        no weights but the model's config, the demonstrations and the model it names
        (in_context.py)."""
        from ..in_context import write_demonstrations

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        if self.in_context is None:
            save_model(self.model, d)
        else:
            self.model.config.save_pretrained(d)
            write_demonstrations(d, self.demonstrations)
        self.tokenizer.save_pretrained(d)
        extra = {"architecture": "causal" if self.causal else "seq2seq"}
        if self.base is not None:
            extra["base"] = self.base
        if self.in_context is not None:
            extra["in_context"] = self.in_context
        write_teacher_json(d, self.kind, self.schema, pooling=self.pooling, k=self.k, **extra)
        self.source_dir = d
        return d


def _causal_target_log_likelihood(model, ids: Tensor, mask: Tensor, labels: Tensor, chunk: int = 256) -> Tensor:
    """Sum of log p(target token) per row of a causal LM, the output projection applied at the
    target positions only, ``chunk`` at a time (a 262k-token vocabulary's logits over every position
    of a batch would take gigabytes)."""
    head = output_head(model)
    out = []
    if head is None:  # capped logits: through the model, whole
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(2, labels[:, 1:].clamp(min=0).unsqueeze(-1)).squeeze(-1)
        return (logp * (labels[:, 1:] >= 0)).sum(1)
    h = model.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1]
    target = labels[:, 1:]
    where = (target >= 0).nonzero(as_tuple=True)
    states, tokens = h[where], target[where]
    for i in range(0, len(tokens), chunk):
        logits = project(head, states[i : i + chunk])
        out.append(logits.gather(1, tokens[i : i + chunk, None]).squeeze(1) - logits.logsumexp(-1))
    total = torch.zeros(ids.shape[0], device=ids.device)
    return total.index_add_(0, where[0], torch.cat(out) if out else torch.zeros(0, device=ids.device))


def architecture(config, gguf: bool = False) -> str:
    """``seq2seq`` (an encoder-decoder), ``causal`` (a decoder-only LM) or ``encoder`` (an encoder
    to warm-start as both halves of an ``EncoderDecoderModel``), from a model's config: an
    encoder-decoder says so (``is_encoder_decoder``); a decoder-only LM names a ``...ForCausalLM``
    or ``...LMHeadModel`` class in ``architectures``, or comes from a GGUF file (``gguf``: the
    architectures transformers reads from GGUF are decoder-only LMs, T5 apart); anything else is an
    encoder."""
    if getattr(config, "is_encoder_decoder", False):
        return "seq2seq"
    names = getattr(config, "architectures", None) or []
    if any(n.endswith(("ForCausalLM", "LMHeadModel")) for n in names) or gguf:
        return "causal"
    return "encoder"


def build_sentscore_teacher(
    model_path: str,
    schema: LabelSchema,
    *,
    trust_remote_code: bool = False,
    seed: int = 13,
    full_attention: bool = False,
) -> SentScoreTeacher:
    """A new SenTScore teacher from a directory, hub name or GGUF file (``teachers/pretrained.py``):
    a sequence-to-sequence checkpoint or a decoder-only LM as it is, or an encoder-only one (BERT,
    MiniLM...) warm-started as both encoder and decoder of an ``EncoderDecoderModel`` (its
    cross-attention initialised at random); :func:`architecture` tells which. ``full_attention``:
    a decoder-only LM's sliding-window layers attend to the whole sequence (in_context.py)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer, EncoderDecoderModel

    tokenizer = from_pretrained(AutoTokenizer, model_path, trust_remote_code=trust_remote_code)
    config = from_pretrained(AutoConfig, model_path, trust_remote_code=trust_remote_code)
    torch.manual_seed(seed)
    kind = architecture(config, gguf=model_path.endswith(".gguf"))
    if kind == "encoder":
        model = EncoderDecoderModel.from_encoder_decoder_pretrained(model_path, model_path)
        model.config.decoder_start_token_id = tokenizer.cls_token_id
        model.config.pad_token_id = tokenizer.pad_token_id
    else:
        auto = AutoModelForSeq2SeqLM if kind == "seq2seq" else AutoModelForCausalLM
        extra = {"config": without_sliding_window(config)} if full_attention and kind == "causal" else {}
        model = from_pretrained(auto, model_path, trust_remote_code=trust_remote_code, **extra)
    teacher = SentScoreTeacher(model, tokenizer, LabelSchema("sBIO", schema.entity_types))
    teacher.base = base_record(model_path)
    return teacher


def load_sentscore_teacher(d: Path, meta: dict, trust_remote_code: bool = False) -> SentScoreTeacher:
    """A saved teacher: causal when ``teacher.json`` says so (teachers saved before issue 35 are
    encoder-decoders); an in-context one reads its model where ``teacher.json`` names it, checked
    against the sha256 it recorded, with the config it was made with (in_context.py)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    from ..in_context import checked_model, read_demonstrations

    auto = AutoModelForCausalLM if meta.get("architecture") == "causal" else AutoModelForSeq2SeqLM
    in_context = meta.get("in_context")
    if in_context is None:
        model = auto.from_pretrained(d, trust_remote_code=trust_remote_code)
    else:
        config = AutoConfig.from_pretrained(d, trust_remote_code=trust_remote_code)
        source = checked_model(d, in_context)
        model = from_pretrained(auto, source, trust_remote_code=trust_remote_code, config=config)
    tokenizer = AutoTokenizer.from_pretrained(d, trust_remote_code=trust_remote_code)
    teacher = SentScoreTeacher(model, tokenizer, LabelSchema.from_json(meta["label_schema"]), k=meta.get("k", 1))
    teacher.base = meta.get("base")
    if in_context is not None:
        teacher.in_context = in_context
        teacher.set_demonstrations(read_demonstrations(d))
    return teacher


class SentScoreKind(TeacherKind):
    """A generative model read with SenTScore (paper 004): its beams over sBIO tags, their scores
    and the best beam's per-word tag scores."""

    model = SentScoreTeacher
    help = (
        "a sequence-to-sequence model, a decoder-only LM, or an encoder warm-started as encoder and "
        "decoder, trained on SenT' targets, tags in sBIO (paper 004)"
    )
    target_scheme = "sBIO"  # SenT' targets are sBIO tags: corpora in other schemes are converted
    finetune_defaults = {"epochs": 20, "lr": 1e-3, "patience": 5}  # §5: AdamW at 1e-3 for the whole model
    layerwise_lr = False  # paper 004: one AdamW rate
    co_finetune = False
    name = "sentscore"
    default_k = 1  # greedy, as paper 004 builds its pseudo-labels

    def refusal(self, options):
        if options.hidden_layers or options.subwords:
            return (
                "a SenTScore teacher stores no hidden layers or subword fields: leave out "
                "--hidden-layers and --subwords"
            )
        return None

    def decoding(self, options, scheme, precision):
        return {"k": options.k, "constrained": True, "scheme": scheme, "precision": precision, "algorithm": "sentscore"}

    def own_fields(self, schema, options):
        return [
            FieldSpec(
                "kbest_paths",
                "example",
                "int16",
                ("k", "words"),
                description="the SenTScore beams (sBIO tag ids), best first; the first is the pseudo-label",
            ),
            FieldSpec(
                "kbest_scores",
                "example",
                "float32",
                ("k",),
                description="log-likelihood of each beam's SenT' output under the teacher",
            ),
            FieldSpec(
                "tag_scores",
                "word",
                "float32",
                (schema.num_tags,),
                "zarr",
                description="log-likelihood of 't s_i' for each sBIO tag t at word i on the best beam "
                "(-inf where sBIO forbids t)",
            ),
        ]

    def own_values(self, host, j, n, options):
        scores = host["kbest_log_probs"][j]
        valid = np.isfinite(scores)
        return {
            "kbest_paths": host["kbest_paths"][j][valid, :n].astype(np.int16),
            "kbest_scores": scores[valid].astype(np.float32),
            "tag_scores": host["logits"][j, :n].astype(np.float32),
        }

    def build(self, encoder_path, schema, *, trust_remote_code=False, seed=13, **head):
        """Pooling, dropout and maximum length do not apply to an encoder-decoder."""
        return build_sentscore_teacher(encoder_path, schema, trust_remote_code=trust_remote_code, seed=seed)

    def load(self, directory, meta, trust_remote_code=False):
        if meta.get("server"):  # an LM behind an inference server (teachers/server.py)
            from ..server import load_server_teacher

            return load_server_teacher(Path(directory), meta)
        return load_sentscore_teacher(Path(directory), meta, trust_remote_code)


KIND = SentScoreKind()
