"""A SenTScore teacher whose LM answers behind an OpenAI-compatible inference server (issue 55):
``distill-cache server-teacher --endpoint URL --model NAME``. vLLM, SGLang, llama.cpp's server and
hosted APIs spread an LM over GPUs and machines; this teacher only asks them. Its directory is an
in-context teacher's (``in_context.py``: the demonstrations, the tokenizer and config of a local
copy of the model, its sha256) plus the endpoint; ``build``, ``distill-eval`` and the sentscore
recipe take it as any ``sentscore`` teacher.

**How it scores: the server scores text it is given (``echo``), it never generates.** For word i
and every tag t that sBIO allows there, the prompt so far followed by "t s_i" is sent with
``echo: true, logprobs: 1, max_tokens: 1``; the server returns the log-probability of every
prompt token, and the score of t is the sum over the tokens of "t s_i", as paper 004's eq. 1
defines it and the local search computes it. The best tag is kept and the next word follows (K = 1,
greedy, the kind's default). So only the tag set can come out: no text the server writes is read,
which is the strongest form of the constrained decoding a grammar gives. Why not a grammar with
``top_logprobs``: llama.cpp's ``top_logprobs`` are those of the distribution *before* its grammar
applies, so a tag's first token can be missing from the top N, and a tag of several tokens would
be scored by its first token alone; echo scoring gives every tag its exact score at the price of
one request per allowed tag and word (about 5 a word with CoNLL's 6 tags; the server's prompt
cache keeps the shared prefix, docs/BENCHMARKS.md).

**What the cache gets, and how it differs from the local search** (also in the layer's
``decoding``, in the manifest): the 1-best path, its score, and per-word tag distributions
renormalised over the tags (``log_softmax`` of the scores; a per-word constant, which the recipe's
softmax ignores), -inf where sBIO forbids a tag. It equals the local in-context teacher's greedy
search up to the server's arithmetic: llama.cpp computes with the quantized weights the local
teacher dequantizes to fp32. Beams (K > 1) are refused.

**Where each token's log-probability is.** OpenAI's protocol puts token i's at entry i of
``token_logprobs`` (the first, with nothing before it, null). llama-cpp-python 0.3.36 puts it one
entry early (entry i holds token i + 1's; the last entry, the generated token's). So the teacher
finds the alignment when it is made (:func:`align_echo`): it scores a probe (the first
demonstration, or the pool's first sentence, with its gold target) with the local copy of the
model and through the server, keeps the offset (0 or 1) at which they follow each other, and records it
(``server.echo_offset``). A server that agrees with the local model at neither offset (another
model, another tokenizer) is refused there, by name, before anything is built.

**Checks.** Every prompt is text (``tokenizer.decode`` of the ids the local teacher would feed);
the server's count of prompt tokens must equal the local tokenizer's, so a server that tokenizes
differently (another model, another tokenizer) is refused by name, not scored wrong. A malformed
answer (no ``logprobs``, a score that is not a number, too few tokens) names the sentence; it is
never written.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch import Tensor, nn

from ..cache_schema import LabelSchema
from .base import TeacherError, TeacherOutput, teacher_fingerprints, write_teacher_json
from .endpoint import ANSWERS, Answers, Endpoint, EndpointConfig, EndpointError
from .in_context import checked_model, read_demonstrations, write_demonstrations
from .sentscore_search import SentFormat

APPROXIMATION = (
    "SenTScore greedy (K=1) computed by an OpenAI-compatible server: each allowed tag t at word i "
    "scored by echo as log p('t s_i' | prompt so far), the server's arithmetic (its quantized weights); "
    "tag_scores renormalised over the tags (log_softmax), -inf where sBIO forbids a tag"
)


def echo_request(text: str) -> dict:
    """A ``/completions`` body that scores ``text`` (module docstring): its tokens' log-probabilities, nothing generated beyond one token."""
    return {"prompt": text, "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": True}


class ServerSentScoreTeacher(nn.Module):
    kind = "sentscore"
    pooling = "first"

    def __init__(self, tokenizer, schema: LabelSchema, endpoint: EndpointConfig, directory: Path | None = None):
        super().__init__()
        if schema.scheme != "sBIO":
            raise ValueError(f"a SenTScore teacher tags in sBIO, not {schema.scheme}: convert the label schema")
        self.tokenizer, self.schema, self.endpoint_cfg = tokenizer, schema, endpoint
        self.format = SentFormat(tokenizer, schema.tags)
        self.k = 1
        self.source_dir, self.in_context, self.demonstrations = directory, None, []
        self._endpoint: Endpoint | None = None
        self._embeddings: nn.Module | None = None

    def set_demonstrations(self, demonstrations) -> None:
        self.demonstrations = [(list(w), list(t)) for w, t in demonstrations]
        self.format.set_demonstrations(self.demonstrations)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def endpoint(self) -> Endpoint:
        if self._endpoint is None:
            if self.source_dir is None:
                raise TeacherError("a server teacher keeps its answers in its directory: save it first")
            self._endpoint = Endpoint(self.endpoint_cfg, Answers(Path(self.source_dir) / ANSWERS))
        return self._endpoint

    @property
    def encoder(self) -> nn.Module:
        """The local copy of the model (checked against its sha256), for its input embeddings:
        what students start from (``export_for_students``)."""
        if self._embeddings is None:
            from transformers import AutoConfig, AutoModelForCausalLM

            from .pretrained import from_pretrained

            source = checked_model(Path(self.source_dir), self.in_context)
            config = AutoConfig.from_pretrained(self.source_dir)
            self._embeddings = from_pretrained(AutoModelForCausalLM, source, config=config).get_decoder()
        return self._embeddings

    # -- the search ---------------------------------------------------------------------------
    def prepare(self, batch_words) -> None:
        return None

    def decode_batch(self, batch_words: list[list[str]]) -> tuple[Tensor, Tensor, Tensor]:
        """Greedy SenTScore by the server: ``(paths [B, 1, W], scores [B, 1], tag scores [B, W, T̄])``,
        the sentences' requests ``max_concurrency`` at a time."""
        B, W, T = len(batch_words), max(len(w) for w in batch_words), len(self.schema.tags)
        paths = torch.full((B, 1, W), -1, dtype=torch.long)
        beams = torch.zeros(B, 1)
        scores = torch.full((B, W, T), float("-inf"))
        n = self.endpoint_cfg.max_concurrency
        with ThreadPoolExecutor(n, thread_name_prefix="seqdistill-ask") as asks:
            with ThreadPoolExecutor(n, thread_name_prefix="seqdistill-sentence") as sentences:
                results = list(sentences.map(lambda w: self._greedy(w, asks), batch_words))
        for b, (tags, steps) in enumerate(results):
            n_words = len(tags)
            paths[b, 0, :n_words] = torch.tensor(tags)
            step = torch.tensor(steps)
            beams[b, 0] = step.gather(1, torch.tensor(tags)[:, None]).sum()
            scores[b, :n_words] = step
        return paths, beams, scores

    def _greedy(self, words: list[str], asks: ThreadPoolExecutor) -> tuple[list[int], list[list[float]]]:
        """One sentence: each word's allowed tags scored by echo, the best kept (module docstring)."""
        fmt = self.format
        start_ok, after_ok = fmt.allowed()
        prefix = fmt.encode_input(words, causal=True)[len(fmt.prefix) :] + [fmt.sentinels[0]]
        chosen, steps = [], []
        for i in range(1, len(words) + 1):
            ok = start_ok if not chosen else after_ok[chosen[-1]]
            blocks = [fmt.tag_ids[t] + [fmt.sentinels[i]] for t in range(len(fmt.tags))]
            futures = {
                t: asks.submit(self._score, prefix + blocks[t], len(blocks[t]), words)
                for t in range(len(blocks))
                if ok[t]
            }
            step = [futures[t].result() if t in futures else float("-inf") for t in range(len(blocks))]
            best = max(range(len(step)), key=step.__getitem__)
            chosen.append(best)
            steps.append(step)
            prefix = prefix + blocks[best]
        return chosen, steps

    def _score(self, ids: list[int], n: int, words: list[str]) -> float:
        """log p(the last ``n`` tokens of ``ids`` | the ones before), from the server's echo."""
        text = self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        body = echo_request(text)
        where = f"the sentence {' '.join(words[:12])!r}"
        expected = len(self.format.prefix) + len(ids)  # the server adds the model's own special tokens
        try:
            return self.endpoint.complete(body, lambda answer: self._read(answer, expected, n, where))
        except EndpointError as e:
            raise EndpointError(f"{e} (scoring {where})" if where not in str(e) else str(e)) from None

    def _read(self, answer: dict, expected: int, n: int, where: str) -> float:
        """The sum of the last ``n`` prompt tokens' log-probabilities in an echo answer, checked."""
        try:
            logprobs = answer["choices"][0]["logprobs"]["token_logprobs"]
            prompt_tokens = int(answer["usage"]["prompt_tokens"])
        except (KeyError, IndexError, TypeError, ValueError):
            raise EndpointError(
                f"{self.endpoint_cfg.url}: an answer without choices[0].logprobs.token_logprobs and usage.prompt_tokens "
                f"for {where}: does the server support echo with logprobs (llama.cpp: logits_all)?"
            ) from None
        if prompt_tokens != expected:
            raise EndpointError(
                f"{self.endpoint_cfg.url}: the server reads the prompt of {where} as {prompt_tokens} tokens where the "
                f"teacher's tokenizer gives {expected}: it does not serve the model this teacher was made with"
            )
        o = self.endpoint_cfg.echo_offset  # token i's log-probability is entry i - o (align_echo)
        # the generated token's entry may be missing (an end of sequence): only the prompt's are needed
        part = logprobs[prompt_tokens - n - o : prompt_tokens - o] if len(logprobs) >= prompt_tokens - o else []
        if len(part) != n or not all(isinstance(x, (int, float)) and not math.isnan(x) for x in part):
            raise EndpointError(f"{self.endpoint_cfg.url}: malformed log-probabilities for {where}: {part!r}")
        return float(sum(part))

    def predict(self, batch_words: list[list[str]]) -> list[list[str]]:
        paths, _, _ = self.decode_batch(batch_words)
        return [self.schema.decode(paths[b, 0, : len(w)].tolist()) for b, w in enumerate(batch_words)]

    def outputs(self, batch_words, tags: Tensor | None = None, *, k: int | None = None, hidden_layers=(), **_):
        """What the cache stores (module docstring): the 1-best path and score, the per-word tag
        distributions renormalised over the tags, and the gold target's NLL on labelled rows."""
        if k not in (None, 1):
            raise TeacherError(f"a server teacher decodes greedily (K = 1); --kbest {k} needs the local search")
        if hidden_layers:
            raise ValueError("a SenTScore teacher stores no hidden layers; leave --hidden-layers out")
        paths, beams, scores = self.decode_batch(batch_words)
        W = paths.shape[-1]
        mask = torch.arange(W)[None] < torch.tensor([len(w) for w in batch_words])[:, None]
        renormalised = torch.log_softmax(scores, -1).nan_to_num(neginf=float("-inf"))
        out = TeacherOutput(mask, renormalised, kbest_paths=paths, kbest_log_probs=beams)
        if tags is not None:
            out.gold_nll = self.gold_nll(batch_words, tags)
        return out

    def gold_nll(self, batch_words, tags: Tensor) -> Tensor:
        """Negative log-likelihood of each gold SenT' target after its prompt (NaN without gold)."""
        nll = torch.full((len(batch_words),), float("nan"))
        fmt = self.format
        for b, words in enumerate(batch_words):
            if tags[b, 0] < 0:
                continue
            target = fmt.encode_target(self.schema.decode(tags[b, : len(words)].tolist()))
            prompt = fmt.encode_input(words, causal=True)[len(fmt.prefix) :]
            nll[b] = -self._score(prompt + target, len(target), words)
        return nll

    # -- decoding, export and identity ----------------------------------------------------------
    def decoder(self) -> None:
        return None

    def export_graph(self):
        raise TeacherError(f"{self.source_dir}: a server teacher is a model behind an endpoint; export a student")

    def export_head(self, directory: Path) -> None:
        """Nothing beyond the embeddings."""

    def fingerprints(self) -> dict[str, str]:
        return teacher_fingerprints(self.source_dir)

    def save(self, directory, config) -> Path:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        config.save_pretrained(d)
        self.tokenizer.save_pretrained(d)
        write_demonstrations(d, self.demonstrations)
        decoding = {
            "algorithm": "sentscore-server",
            "approximates": APPROXIMATION,
            "served_model": self.endpoint_cfg.model,
        }
        write_teacher_json(
            d,
            self.kind,
            self.schema,
            pooling=self.pooling,
            k=1,
            architecture="causal",
            in_context=self.in_context,
            server=self.endpoint_cfg.to_json(),
            decoding=decoding,
        )
        self.source_dir = d
        return d


def align_echo(teacher: ServerSentScoreTeacher, model, words: list[str], tags: list[str]) -> tuple[int, float]:
    """The offset of the server's echo log-probabilities (module docstring), from a probe scored
    both by ``model`` (the local copy) and by the server: ``(offset, mean absolute difference of
    the log-probabilities at that offset)``. The offset is the one at which the two follow each
    other (Pearson correlation of the probe's log-probabilities); none at ``PROBE_CORRELATION``
    or more is refused. Not the difference itself: a server's quantized arithmetic (llama.cpp's
    Q4_K_M Gemma 3 270M) differs from the local fp32 by 0.1 to 0.6 nats a token on SenT' prompts,
    whose sentinels are tokens a base LM finds very unlikely."""
    fmt = teacher.format
    body = fmt.encode_input(words, causal=True)[len(fmt.context or fmt.prefix) :] + fmt.encode_target(tags)[:-1]
    ids = fmt.prefix + body
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
    local = [logp[i - 1, ids[i]].item() for i in range(1, len(ids))]  # token i's, i >= 1
    text = teacher.tokenizer.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    answer = teacher.endpoint.complete(echo_request(text))
    try:
        served = answer["choices"][0]["logprobs"]["token_logprobs"]
        assert int(answer["usage"]["prompt_tokens"]) == len(ids)
    except (KeyError, IndexError, TypeError, ValueError, AssertionError):
        raise EndpointError(
            f"{teacher.endpoint_cfg.url}: the probe's answer has no token_logprobs for its {len(ids)} prompt tokens: "
            "does the server support echo with logprobs (llama.cpp: --logits_all true), and serve this model?"
        ) from None
    fits = {}
    for o in (0, 1):
        pairs = [(local[i - 1], served[i - o]) for i in range(2, len(ids)) if isinstance(served[i - o], (int, float))]
        if len(pairs) == len(ids) - 2 and len(pairs) > 2:
            a, b = torch.tensor(pairs, dtype=torch.float64).T
            fits[o] = (float(torch.corrcoef(torch.stack([a, b]))[0, 1]), float((a - b).abs().mean()))
    best = max(fits, key=lambda o: fits[o][0], default=None)
    if best is None or not fits[best][0] >= PROBE_CORRELATION:
        got = ", ".join(f"offset {o}: correlation {c:.3f}" for o, (c, _) in fits.items()) or "no comparable answer"
        raise EndpointError(
            f"{teacher.endpoint_cfg.url}: the server's log-probabilities of a probe do not follow the local model's "
            f"({got}; {PROBE_CORRELATION} needed): it does not serve {teacher.endpoint_cfg.model!r} as --local-model has it"
        )
    return best, fits[best][1]


PROBE_CORRELATION = 0.95  # quantized arithmetic moves log-probabilities by tenths of a nat, another model by far more


def load_server_teacher(d: Path, meta: dict) -> ServerSentScoreTeacher:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(d)
    endpoint = EndpointConfig(**meta["server"])
    teacher = ServerSentScoreTeacher(tokenizer, LabelSchema.from_json(meta["label_schema"]), endpoint, d)
    teacher.in_context = meta.get("in_context")
    teacher.set_demonstrations(read_demonstrations(d))
    return teacher
