"""Teachers made from a prompted LM rather than fine-tuned (issue 55): ``distill-cache
in-context-teacher`` (the LM in this process, ``in_context.py`` says how) and ``distill-cache
server-teacher`` (the LM behind an inference server, ``server.py``). Both write a ``sentscore``
teacher directory that names a local copy of the model and its sha256 and holds the
demonstrations."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..cache_schema import LabelSchema
from .base import TeacherError
from .endpoint import EndpointConfig
from .in_context import draw_demonstrations, local_model, model_sha256
from .kinds.sentscore import build_sentscore_teacher
from .pretrained import from_pretrained
from .sentscore_search import without_sliding_window
from .server import ServerSentScoreTeacher, align_echo


def _record(source: str, demos: list, n_demos: int | None, seed: int, pool, context_tokens: int) -> dict:
    """What ``teacher.json`` says of the model and the demonstrations (``in_context``)."""
    return {
        "model": source,
        "model_sha256": model_sha256(source),
        "demonstrations": len(demos),
        "seed": seed if n_demos is not None else None,
        "pool": {"file": os.path.basename(pool.path), "sha256": pool.sha256, "sentences": len(pool.sentences)},
        "full_attention": True,
        "context_tokens": context_tokens,
    }


def make_in_context_teacher(
    model: str,
    pool,
    schema: LabelSchema,
    n_demos: int | None,
    seed: int,
    out,
    *,
    trust_remote_code: bool = False,
    log=print,
):
    """Write an in-context SenTScore teacher to ``out``: ``model`` (a local decoder-only LM, as a
    directory or GGUF file) and demonstrations drawn from ``pool`` (a labelled ``Corpus`` in
    sBIO, whose ``schema`` the teacher tags in). Returns the teacher."""
    source = local_model(model)
    teacher = build_sentscore_teacher(source, schema, trust_remote_code=trust_remote_code, full_attention=True)
    if not teacher.causal:
        raise TeacherError(f"{model}: in-context SenTScore needs a decoder-only LM; this model is an encoder-decoder")
    demos = draw_demonstrations(pool.sentences, n_demos, seed)
    teacher.set_demonstrations([(s.words, s.tags) for s in demos])
    teacher.in_context = _record(source, demos, n_demos, seed, pool, len(teacher.format.context))
    teacher.save(out)
    log(
        f"in-context teacher: {len(demos)} demonstration(s) ({len(teacher.format.context)} tokens, their cache "
        f"shared) before every prompt of {os.path.basename(source)}; written to {out}"
    )
    return teacher


def make_server_teacher(
    endpoint: EndpointConfig, local: str, pool, schema: LabelSchema, n_demos: int | None, seed: int, out, log=print
) -> ServerSentScoreTeacher:
    """Write a server teacher to ``out``: ``endpoint`` serves the model of which ``local`` (a
    directory or GGUF file) is a copy: its tokenizer renders and counts the prompts, its config
    and input embeddings are what students start from, its sha256 is recorded, and a probe scored
    by both finds where the server puts each token's log-probability (``server.align_echo``)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    source = local_model(local)
    config = from_pretrained(AutoConfig, source)
    if getattr(config, "is_encoder_decoder", False):
        raise TeacherError(f"{local}: a server teacher reads a decoder-only LM; this model is an encoder-decoder")
    tokenizer = from_pretrained(AutoTokenizer, source)
    teacher = ServerSentScoreTeacher(tokenizer, schema, endpoint)
    demos = draw_demonstrations(pool.sentences, n_demos, seed)
    teacher.set_demonstrations([(s.words, s.tags) for s in demos])
    teacher.in_context = _record(source, demos, n_demos, seed, pool, len(teacher.format.context))
    config = without_sliding_window(config)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise TeacherError(f"{out}: exists and is not empty; remove it or choose another --out")
    staging = out.with_name(out.name + ".partial")  # renamed to OUT once the probe agrees: nothing half-made
    shutil.rmtree(staging, ignore_errors=True)
    try:
        teacher.save(staging, config)
        model = from_pretrained(AutoModelForCausalLM, source, config=config).eval()
        sample = demos[0] if demos else pool.sentences[0]
        endpoint.echo_offset, error = align_echo(teacher, model, sample.words, sample.tags)
        teacher.endpoint.close()
        teacher.save(staging, config)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if out.exists():
        out.rmdir()
    staging.rename(out)
    teacher.source_dir, teacher._endpoint = out, None
    log(
        f"server teacher: {endpoint.model} at {endpoint.url}, {len(demos)} demonstration(s) "
        f"({len(teacher.format.context)} tokens); its echo log-probabilities {endpoint.echo_offset} token(s) late, "
        f"{error:.3f} nats from the local model's on a probe; written to {out}"
    )
    return teacher
