"""``distill-cache build``: run a teacher over corpora and write its layer of the cache.

The plan is deterministic — corpora in the order given, sentences in file order, ``shard_size``
sentences a shard — so a build killed at any moment and run again resumes where it stopped:
committed shards are skipped, nothing is duplicated (see ``cache_schema.writer``). One idea in
one module (over 400 lines): the build loop, from corpora to a committed layer, read top to bottom.

Within a shard, sentences are sorted by length and cut into batches under a word budget
(``max_words_per_batch`` counts padded words: batch size x longest sentence), so padding is small
and the accelerator sees full batches. The teacher runs under ``inference_mode`` (bf16 autocast on
GPU); k-best, marginals and pooling are computed batched on the device. The batches go through a
pipeline (``stream.py``): tokenization workers run ahead of the device, outputs come back without
blocking, shard writers turn them into columns and compress them in parallel.

What a layer holds is the teacher kind's business (``teachers/kinds/``: its fields, its default K
and refused options, its decoding settings, its gold targets, its outputs turned into columns);
this module never switches on a kind's name.

Under ``torchrun`` each rank builds the shards ``i`` with ``i % world_size == rank``; rank 0
writes the exports and, after all ranks finish, the manifest.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from tqdm import tqdm

from .. import distributed
from ..cache_schema import CacheWriter, LabelSchema, TeacherInfo
from ..cache_schema.encodings import fit_pca, project
from ..cache_schema.info import cache_summary
from ..cache_schema.layout import exports_dir, exports_marker
from ..cache_schema.lock import BuildLock, CacheLockedError
from ..cache_schema.manifest import check_id
from ..cache_schema.storage import CacheStore
from ..config_fields import option
from ..corpora import HF_PREFIX, Corpus, read_corpus
from ..corpora.read import CorpusSource
from ..corpora.streamed import StreamedCorpus, scan_corpus
from ..teachers import (
    GLINER_CONFIG,
    PRECISIONS,
    LayerOptions,
    SpanOptions,
    Teacher,
    TeacherError,
    TeacherKind,
    export_for_students,
    load_teacher,
    marked_kind,
    parse_entity_types,
    resolve_precision,
    teacher_fingerprints,
    teacher_kind,
    to_host,
)
from ..teachers.kind import PROJECTION_EXPORT
from ..vocabulary import FREQUENT_SUBWORDS, FULL_MATRIX_ROWS, KeptRows, choose_rows
from . import stream
from .stream import StageTimes

DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


class BuildError(RuntimeError):
    """A build that cannot proceed, with the reason and what to do."""


@dataclass
class CorpusSpec:
    """``NAME=PATH[@split]`` from the command line.

    For a Hugging Face dataset, ``NAME=hf:DIR@SPLIT`` keeps ``@SPLIT`` in the path as well: it
    picks the DatasetDict's split and names the cache's (``corpora.read_corpus``)."""

    name: str
    path: str
    split: str
    labelled: bool
    tag_names: tuple[str, ...] | None = None  # names of integer tag ids (--tag-names)

    @classmethod
    def parse(cls, text: str, labelled: bool, tag_names: tuple[str, ...] | None = None) -> "CorpusSpec":
        name, sep, rest = text.partition("=")
        if not sep or not name or not rest:
            raise BuildError(f"{text!r}: expected NAME=PATH" + ("[@SPLIT]" if labelled else ""))
        path, split = rest, ("train" if labelled else "unlabelled")
        head, at, tail = rest.rpartition("@")
        if at and head and tail and "/" not in tail:
            path, split = (rest if rest.startswith(HF_PREFIX) else head), tail
        return cls(name, path, split, labelled, tag_names)


@dataclass
class BuildConfig:
    """What ``distill-cache build`` asks of a teacher's layer and of the run (its options are these
    fields, ``seqdistill.cli.options``)."""

    k: int | None = option(
        None,
        "Paths kept per sentence: CRF teachers' k-best (default 10, paper 000), SenTScore's beam (default 1, paper 004).",
        flag="kbest",
    )
    marginals: bool = option(True, "crf and softmax teachers: store the marginals (--no-marginals: do not).")
    hidden_layers: tuple[int, ...] = option(
        (), "Comma-separated encoder layers to store (0 = embeddings), e.g. 6,7.", metavar="L,L"
    )
    subwords: bool = option(False, "Also store subword-level fields (for students sharing the tokenizer).")
    dtype: str = option("fp16", "Storage dtype of dense float fields.", choices=tuple(DTYPES))
    hidden_dtype: str | None = option(
        None,
        "Hidden states as int8 with a per-word absmax scale (default: --dtype). Readers return floats.",
        choices=("int8",),
    )
    hidden_project: int = option(
        0,
        "Hidden states as N PCA coefficients, fitted on a seeded sample of the first shard (0: full states).",
        metavar="N",
    )
    word_topk: int = option(
        0,
        "Per-word emissions/logits and marginals as their top N tags (0: dense). Readers rebuild dense rows.",
        metavar="N",
    )
    max_words_per_batch: int = option(4096, "Padded words per batch (batch size x longest sentence).")
    shard_size: int = option(1024, "Sentences per shard.")
    device: str | None = option(None, "cpu, cuda, cuda:1 ... (default: cuda if available).")
    precision: str = option(
        "auto",
        "The teacher's forward pass: auto is bf16 autocast on GPU and fp32 on CPU; bf16 autocasts on the CPU "
        "too (about 3x faster on a CPU with AMX/AVX512-BF16; emissions and k-best stay fp32); fp16 is GPU only.",
        choices=PRECISIONS,
    )
    export_layers: int = option(0, "Also export the first N encoder blocks for transformer students.", metavar="N")
    full_vocabulary: bool = option(
        False,
        "Export every row of the teacher's embedding matrix, however large (default: every row of a matrix of "
        f"at most {FULL_MATRIX_ROWS:,}; of a larger one, the rows the corpora use and frequent ones of their scripts).",
    )
    trim_vocabulary: bool = option(
        False,
        f"Trim a matrix of at most {FULL_MATRIX_ROWS:,} rows too: the rows of the subwords the corpora use and "
        "--frequent-subwords more (vocabulary.py).",
    )
    frequent_subwords: int = option(
        FREQUENT_SUBWORDS,
        "A trimmed vocabulary also keeps the tokenizer's N most frequent subwords written in the corpora's scripts "
        "(0: the corpora's subwords alone).",
        metavar="N",
    )
    vocabulary_text: tuple[str, ...] = option(
        (),
        "Comma-separated files (any corpus format; tags ignored) whose words' subwords a trimmed vocabulary "
        "keeps too, with no rows in the cache and no teacher pass: text like what the students will tag.",
        metavar="FILE,FILE",
    )
    workers: int = option(
        0, "Tokenization threads running ahead of the device (0: a quarter of the CPUs, 1 to 4).", metavar="N"
    )
    writers: int = option(0, "Shard writer threads (0: a quarter of the CPUs, 1 to 4).", metavar="N")
    queue_size: int = option(2, "Finished shards waiting for a shard writer (then the device waits).")
    overwrite: bool = option(False, "Replace this teacher's layer (or the whole cache if the corpora changed).")
    trust_remote_code: bool = option(False, "Allow the teacher's own Python code to run (off by default).")
    entity_types: str | None = option(
        None,
        "A span teacher's (GLiNER) types: NAME=TAG,... the names the model reads, the tags the cache writes, "
        "e.g. person=PER,organization=ORG (issue 71).",
        metavar="NAME=TAG,...",
    )
    span_threshold: float = option(
        0.5,
        "A span teacher's threshold: its semi-CRF's bias b = -logit(threshold) on every chosen span "
        "(0.5, GLiNER's default: b = 0).",
    )
    span_temperature: float = option(1.0, "A span teacher's semi-CRF temperature T: phi = (logit + b) / T.")
    wait: float = option(
        0.0,
        "If another build holds the cache's lock, wait this long for it (0: fail at once).",
        metavar="SECONDS",
    )


@dataclass
class BuildReport:
    status: str  # built | added (a teacher layer to an existing cache) | resumed | up-to-date
    examples: int = 0
    words: int = 0
    seconds: float = 0.0
    shards_written: int = 0
    teacher_seconds: float = 0.0  # the streaming phase alone: teacher batches through to published shards
    stages: dict = field(default_factory=dict)  # seconds by stage of that phase (stream.StageTimes)
    bytes_per_word: dict[str, float] = field(default_factory=dict)


def _layer_options(cfg: BuildConfig) -> LayerOptions:
    """What ``cfg`` asks of the teacher's layer, as the teacher kinds take it (K resolved)."""
    span = None
    if cfg.entity_types is not None:
        try:
            types = parse_entity_types(cfg.entity_types)
        except TeacherError as e:
            raise BuildError(str(e)) from None
        span = SpanOptions(types, cfg.span_threshold, cfg.span_temperature)
    return LayerOptions(
        cfg.k,
        cfg.marginals,
        tuple(cfg.hidden_layers),
        cfg.subwords,
        DTYPES[cfg.dtype],
        hidden_int8=cfg.hidden_dtype == "int8",
        hidden_project=cfg.hidden_project,
        word_topk=cfg.word_topk,
        span=span,
    )


def scan_corpora(specs: list[CorpusSpec], scheme: str | None, schema: LabelSchema) -> list[StreamedCorpus]:
    """Read every corpus, one sentence at a time, before anything is written: each once for its
    fingerprint, counts and scheme, then each once more to check every sentence against its
    scheme and against ``schema`` (``corpora/streamed.py``). Labelled ones are given in ``scheme``."""
    corpora, seen = [], set()
    for spec in specs:
        key = (spec.name, spec.split)
        if key in seen:
            raise BuildError(f"corpus {spec.name!r} split {spec.split!r} is given twice")
        seen.add(key)
        source = CorpusSource.of(spec.path, spec.name, spec.split, "auto", spec.labelled, 0, -1, spec.tag_names)
        corpora.append(scan_corpus(source, scheme))
    for c in corpora:
        c.check(schema)
    return corpora


def _teacher_meta(
    teacher_dir: str, trust_remote_code: bool, options: LayerOptions
) -> tuple[TeacherKind, LabelSchema, str, dict, LayerOptions]:
    """Kind, label schema, pooling, what the teacher adds to its layer's decoding settings
    (``teacher.json``'s ``decoding``: a server teacher says how it approximates its kind's search;
    a GLiNER's geometry) and the options as the teacher completes them, of a teacher directory,
    without loading its weights when it is a seqdistill teacher or a directory a kind marks."""
    import json
    from pathlib import Path

    marked = marked_kind(teacher_dir)
    if marked is not None:  # a model's own format (a GLiNER): read with the build's options
        try:
            schema, pooling, decoding, options = marked.read_directory(teacher_dir, options, trust_remote_code)
        except TeacherError as e:
            raise BuildError(str(e)) from None
        return marked, schema, pooling, decoding, options
    meta = Path(teacher_dir) / "teacher.json"
    if meta.exists():
        obj = json.loads(meta.read_text())
        kind, schema = teacher_kind(obj["kind"]), LabelSchema.from_json(obj["label_schema"])
        pooling, decoding = obj.get("pooling", "first"), obj.get("decoding", {})
    else:
        t = load_teacher(teacher_dir, trust_remote_code=trust_remote_code)  # HF token-classification dir
        kind, schema, pooling, decoding = teacher_kind(t.kind), t.schema, t.pooling, {}
    if options.span is not None:
        raise BuildError(
            f"--entity-types names the types of a span teacher (a GLiNER directory, {GLINER_CONFIG}); "
            f"{teacher_dir} is a {kind.name} teacher, whose tags are its own: leave --entity-types out"
        )
    return kind, schema, pooling, decoding, options


@dataclass
class _Plan:
    """What a build does, decided and checked before anything is written (``_plan``)."""

    cfg: BuildConfig  # with the kind's default K filled in
    device: str  # cfg.device, or cuda where there is one
    teacher_id: str
    teacher_dir: str
    kind: TeacherKind
    schema: LabelSchema
    pooling: str
    decoding: dict  # what the teacher adds to the kind's decoding settings (_teacher_meta)
    options: LayerOptions
    corpora: list[StreamedCorpus]
    lengths: np.ndarray  # words of each example, in plan order (the corpora's scans, one after the other)
    fingerprints: dict
    fields: list
    vocabulary_text: list[Corpus]

    @property
    def examples(self) -> int:
        return len(self.lengths)

    @property
    def words(self) -> int:
        return int(self.lengths.sum())

    @property
    def num_shards(self) -> int:
        return -(-self.examples // self.cfg.shard_size)

    @functools.cached_property
    def shard_words(self) -> np.ndarray:
        """Words of each shard (from the scan's lengths, without reading the corpora)."""
        lengths = self.lengths.astype(np.int64)
        return np.add.reduceat(lengths, np.arange(0, len(lengths), self.cfg.shard_size))

    def shard_rows(self) -> Iterator[tuple[int, list[dict]]]:
        """``(index, example rows)`` of every shard, in order, the corpora read again: corpora in
        the order given, sentences in file order, ``shard_size`` a shard (the last one shorter)."""
        rows = itertools.chain.from_iterable(c.example_rows() for c in self.corpora)
        for index in range(self.num_shards):
            yield index, list(itertools.islice(rows, self.cfg.shard_size))


def build_cache(
    out: str,
    teacher_dir: str,
    corpora_specs: list[CorpusSpec],
    cfg: BuildConfig | None = None,
    *,
    teacher_id: str | None = None,
    storage_options: dict | None = None,
    log=print,
) -> BuildReport:
    """Build (or extend, or resume) the cache at ``out`` with the outputs of one teacher: check
    the options, plan the layer (corpora, shards, fields), then under the build lock write the
    examples layer, the teacher's exports and its shards, and commit the manifest."""
    cfg = cfg or BuildConfig()
    _check_config(cfg)
    rank, world, cfg.device = distributed.init(cfg.device)
    t0 = time.time()
    if not os.path.isdir(teacher_dir) and "://" not in teacher_dir:  # a Hub id: its snapshot in the hub cache
        from ..teachers.loading import resolve_model_dir

        teacher_id = teacher_id or teacher_dir.rstrip("/").rsplit("/", 1)[-1]
        teacher_dir = str(resolve_model_dir(teacher_dir))
    plan = _plan(teacher_dir, corpora_specs, cfg, teacher_id)
    cfg = plan.cfg
    # One writer at a time (cache_schema/lock.py): rank 0 holds the lock for the whole build, so
    # that clearing the staging directory of a killed run never pulls files from a live one.
    with _build_lock(out, storage_options, cfg, rank, world, log) as lock:
        writer, examples, layer = _open_layers(out, storage_options, plan, rank, world, log)
        if layer.complete and examples.complete:
            log(
                f"{out}: already holds teacher {plan.teacher_id!r} over these corpora with the same fingerprints; "
                "nothing to do"
            )
            return BuildReport("up-to-date", plan.examples, plan.words)
        status = _status(examples, layer, plan.num_shards)
        mine = [i for i in range(plan.num_shards) if i % world == rank]
        todo = [i for i in mine if not layer.is_committed(i)]
        needs_exports = rank == 0 and not layer.has_exports()
        teacher = None
        if todo or needs_exports:
            teacher = load_teacher(
                teacher_dir, trust_remote_code=cfg.trust_remote_code, device=plan.device, options=plan.options
            )
        if needs_exports:
            _export_for_students(teacher, layer, plan, log)
        if cfg.hidden_project:
            distributed.barrier(world)  # rank 0 published the projection that every rank applies
        projection = _read_projection(writer, layer.name) if cfg.hidden_project and todo else None
        t_teacher = time.time()
        stages = StageTimes()
        shards = _shards(plan, mine, todo, examples)
        if todo:
            stages = _run_teacher(teacher, plan, shards, todo, layer, rank, projection, log)
        else:
            for _ in shards:  # examples shards only (a resumed build whose teacher shards are all there)
                pass
        t_teacher = time.time() - t_teacher
        distributed.barrier(world)
        report = BuildReport(
            status, plan.examples, plan.words, time.time() - t0, len(todo), t_teacher, stages=stages.to_json()
        )
        if rank == 0:
            lock.check()  # another build took the lock meanwhile: do not commit over it
            _commit(writer, report, plan.teacher_id, out, log)
    distributed.done(world)
    return report


def _check_config(cfg: BuildConfig) -> None:
    """Refuse options that contradict each other or name nothing, before any file is read."""
    try:
        resolve_precision(cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"), cfg.precision)
    except TeacherError as e:
        raise BuildError(f"--precision: {e}") from None
    if cfg.dtype not in DTYPES:
        raise BuildError(f"dtype {cfg.dtype!r} is not one of {', '.join(DTYPES)}")
    if cfg.hidden_dtype not in (None, "int8"):
        raise BuildError(
            f"hidden dtype {cfg.hidden_dtype!r}: give int8, or leave it out to store hidden states as --dtype"
        )
    if (cfg.hidden_project or cfg.hidden_dtype) and not cfg.hidden_layers:
        raise BuildError("--hidden-dtype and --hidden-project encode hidden layers: give --hidden-layers too")
    if cfg.hidden_project < 0 or cfg.word_topk < 0:
        raise BuildError("--hidden-project and --word-topk take a positive number (0: off)")
    if cfg.vocabulary_text and cfg.full_vocabulary:
        raise BuildError(
            "--vocabulary-text widens a trimmed vocabulary, and --full-vocabulary keeps every row: give one"
        )
    if cfg.trim_vocabulary and cfg.full_vocabulary:
        raise BuildError("--trim-vocabulary and --full-vocabulary contradict each other: give one")
    if cfg.frequent_subwords < 0:
        raise BuildError(f"--frequent-subwords {cfg.frequent_subwords}: a count of subwords, 0 or more")


def _plan(teacher_dir: str, corpora_specs: list[CorpusSpec], cfg: BuildConfig, teacher_id: str | None) -> _Plan:
    """The teacher's kind and schema, the corpora read and checked against it, the shards, the
    fields: everything the options decide, checked (on every rank) before anything is written."""
    teacher_id = check_id(teacher_id or os.path.basename(os.path.normpath(teacher_dir)), "teacher id")
    if not os.path.isdir(teacher_dir):
        raise BuildError(f"{teacher_dir}: no such teacher directory")
    kind, schema, pooling, decoding, options = _teacher_meta(teacher_dir, cfg.trust_remote_code, _layer_options(cfg))
    if cfg.k is None:  # the kind's paper default: K = 10 paths for a CRF (paper 000), greedy SenTScore (paper 004)
        cfg = dataclasses.replace(cfg, k=kind.default_k)
        options = dataclasses.replace(options, k=cfg.k)
    refusal = kind.refusal(options)
    if refusal:
        raise BuildError(refusal)
    corpora = scan_corpora(corpora_specs, schema.scheme, schema)
    fingerprints = teacher_fingerprints(teacher_dir)
    hidden_size = kind.hidden_size(teacher_dir)
    if 0 < cfg.hidden_project and cfg.hidden_project >= hidden_size:
        raise BuildError(
            f"--hidden-project {cfg.hidden_project}: the teacher's states have {hidden_size} dimensions; "
            "project to fewer"
        )
    lengths = np.concatenate([c.lengths for c in corpora] or [np.zeros(0, np.int32)])
    first = lengths[: cfg.shard_size]
    sample_words = int(first[_pca_sample(len(first))].sum()) if cfg.hidden_project else 0
    if cfg.hidden_project and sample_words < cfg.hidden_project:
        raise BuildError(
            f"--hidden-project {cfg.hidden_project}: the PCA is fitted on the first shard's words, and its "
            f"sample holds {sample_words} words; project to fewer dimensions or raise --shard-size"
        )
    try:
        fields = kind.fields(schema, hidden_size, options)
    except TeacherError as e:
        raise BuildError(str(e)) from None
    vocabulary_text = [read_corpus(p, "vocabulary", "unlabelled", labelled=False) for p in cfg.vocabulary_text]
    return _Plan(
        cfg,
        cfg.device or ("cuda" if torch.cuda.is_available() else "cpu"),
        teacher_id,
        teacher_dir,
        kind,
        schema,
        pooling,
        decoding,
        options,
        corpora,
        lengths,
        fingerprints,
        fields,
        vocabulary_text,
    )


def _open_layers(out: str, storage_options, plan: _Plan, rank: int, world: int, log):
    """The writer, the examples layer and the teacher's layer (``--overwrite`` first removes what it
    replaces)."""
    cfg = plan.cfg
    writer = CacheWriter(out, storage_options, clean_staging=rank == 0)
    if cfg.overwrite and rank == 0:
        _overwrite(writer, plan.corpora, plan.teacher_id, log)
    distributed.barrier(world)
    writer = CacheWriter(out, storage_options, clean_staging=False)
    examples = writer.examples_layer(plan.schema, [c.info() for c in plan.corpora], plan.num_shards)
    precision = resolve_precision(plan.device, cfg.precision)  # what ran, as the manifest records it
    info = TeacherInfo(
        plan.teacher_id,
        plan.kind.name,
        plan.fingerprints,
        {**plan.kind.decoding(plan.options, plan.schema.scheme, precision), **plan.decoding},
        list(cfg.hidden_layers),
        plan.pooling,
        str(plan.teacher_dir),
    )
    return writer, examples, writer.teacher_layer(info, plan.fields)


def _status(examples, layer, n_shards: int) -> str:
    """resumed (some shard of this build is there already), added (a teacher layer beside complete
    examples) or built."""
    if any(layer.is_committed(i) for i in range(n_shards)) or (
        not examples.complete and any(examples.is_committed(i) for i in range(n_shards))
    ):
        return "resumed"
    return "added" if examples.complete else "built"


def _export_for_students(teacher: Teacher, layer, plan: _Plan, log) -> None:
    """What students need from the teacher (``teachers.export_for_students``): the tokenizer, the
    embedding rows ``vocabulary.choose_rows`` keeps, the first layers, the PCA of ``--hidden-project``."""
    cfg, vocabulary_text = plan.cfg, plan.vocabulary_text
    fitted = _fit_projection(teacher, cfg, next(plan.shard_rows())[1], log) if cfg.hidden_project else None
    matrix_rows = teacher.encoder.get_input_embeddings().weight.shape[0]
    sentences = itertools.chain(
        (s.words for c in plan.corpora for s in c.sentences()), (x.words for c in vocabulary_text for x in c.sentences)
    )
    mode = "full" if cfg.full_vocabulary else "trimmed" if cfg.trim_vocabulary else "auto"
    chosen = choose_rows(teacher.tokenizer, sentences, matrix_rows, mode, cfg.frequent_subwords)
    extra = f" and {len(vocabulary_text)} --vocabulary-text file(s)" if vocabulary_text else ""
    log(f"exports: embedding rows: {chosen.reason}{extra} (vocabulary.py)")
    if chosen.ids is None and vocabulary_text:
        log("  --vocabulary-text: every row is kept, so the file(s) add nothing")
    sources = [
        {"file": os.path.basename(c.path), "sha256": c.sha256, "sentences": len(c.sentences)} for c in vocabulary_text
    ]
    layer.write_exports(lambda d: _write_exports(teacher, d, cfg, fitted, chosen, sources))


def _commit(writer: CacheWriter, report: BuildReport, teacher_id: str, out: str, log) -> None:
    """Write the manifest (the commit point) and log what the layer costs a word."""
    summary = cache_summary(writer.commit())
    for lay in summary["layers"]:
        if lay["name"] == teacher_id:
            report.bytes_per_word = {f["name"]: f["bytes_per_word"] for f in lay["fields"]}
    log(
        f"{out}: {report.status}: {report.examples:,} examples, {report.words:,} words in "
        f"{report.seconds:.1f} s ({report.words / max(report.seconds, 1e-9):,.0f} words/s); "
        f"{summary['bytes'] / 2**20:.1f} MiB"
    )
    for name, bpw in report.bytes_per_word.items():
        log(f"  {name:<22} {bpw:>10.2f} bytes/word")


def _fit_projection(teacher: Teacher, cfg: BuildConfig, rows: list[dict], log) -> dict[str, np.ndarray]:
    """PCA of each stored hidden layer (``--hidden-project N``), fitted on the teacher's states of
    a seeded sample of the first shard: at most ``PCA_SENTENCES`` sentences drawn with seed 0, at
    most 20,000 of their words (encodings.fit_pca). Returns the tensors of the projection export,
    ``hidden_<l>.components`` ``[N, D]`` and ``hidden_<l>.mean`` ``[D]``, also under
    ``subword_hidden_<l>.*`` when subword fields are stored (the same projection)."""
    sample = [rows[i] for i in _pca_sample(len(rows))]
    states: dict[int, list[np.ndarray]] = {layer: [] for layer in cfg.hidden_layers}
    for batch in batches_by_length([r["n_words"] for r in sample], cfg.max_words_per_batch):
        out = teacher.outputs(
            [sample[i]["words"] for i in batch],
            None,
            k=1,
            marginals=False,
            hidden_layers=cfg.hidden_layers,
            subwords=False,
            precision=cfg.precision,
        )
        host = to_host(out)
        for layer in cfg.hidden_layers:
            for j, i in enumerate(batch):
                states[layer].append(host["hidden"][layer][j, : sample[i]["n_words"]])
    tensors: dict[str, np.ndarray] = {}
    for layer, parts in states.items():
        try:
            components, mean, kept = fit_pca(np.concatenate(parts), cfg.hidden_project, seed=0)
        except (ValueError, np.linalg.LinAlgError) as e:  # NaN states, an SVD that does not converge
            raise BuildError(f"hidden layer {layer}: the PCA of the first shard's sample failed ({e})") from None
        log(f"hidden layer {layer}: PCA to {cfg.hidden_project} dimensions keeps {100 * kept:.1f}% of the variance")
        for name in (f"hidden_{layer}", f"subword_hidden_{layer}") if cfg.subwords else (f"hidden_{layer}",):
            tensors[f"{name}.components"], tensors[f"{name}.mean"] = components, mean
    return tensors


PCA_SENTENCES = 512


def _pca_sample(n: int) -> list[int]:
    """Which sentences of the first shard (of ``n``) the PCA is fitted on: ``PCA_SENTENCES`` drawn
    with seed 0, in order."""
    return sorted(np.random.default_rng(0).choice(n, min(n, PCA_SENTENCES), replace=False).tolist())


def _write_exports(
    teacher: Teacher, directory: str, cfg: BuildConfig, projection: dict | None, kept: KeptRows, sources: list[dict]
) -> None:
    how = kept.metadata() if kept.ids is not None else None
    dtype = getattr(torch, DTYPES[cfg.dtype])
    export_for_students(teacher, directory, cfg.export_layers, kept.ids, sources, how, dtype)
    if projection is not None:
        from safetensors.numpy import save_file

        save_file(projection, os.path.join(directory, PROJECTION_EXPORT), metadata={"seed": "0"})


def _read_projection(writer: CacheWriter, layer: str) -> dict[str, np.ndarray]:
    """The projection the layer's exports hold (written by this build or by the one it resumes),
    checked against the exports marker's sha256."""
    from safetensors.numpy import load

    rel = f"{exports_dir(layer)}/{PROJECTION_EXPORT}"
    listed = {f["path"]: f for f in writer.store.read_json(exports_marker(layer))}
    data = writer.store.read_bytes(rel) if rel in listed else None
    if data is None or hashlib.sha256(data).hexdigest() != listed[rel]["sha256"]:
        raise BuildError(
            f"{writer.store.url}/{rel}: the layer's PCA projection is missing or damaged; rebuild the layer with --overwrite"
        )
    return load(data)


def _project_host(host: dict, projection: dict[str, np.ndarray]) -> None:
    """Replace the hidden states of a batch's host outputs by their PCA coefficients."""
    for key, prefix in (("hidden", "hidden_"), ("subword_hidden", "subword_hidden_")):
        for layer, states in host.get(key, {}).items():
            name = f"{prefix}{layer}"
            host[key][layer] = project(states, projection[f"{name}.components"], projection[f"{name}.mean"])


@contextmanager
def _build_lock(out: str, storage_options, cfg: BuildConfig, rank: int, world: int, log):
    """Rank 0 holds the cache's build lock for the block (None on other ranks); under torchrun
    every rank learns whether rank 0 got it, so that none waits forever for a rank that failed."""
    lock = BuildLock(CacheStore(out, storage_options), wait=cfg.wait, log=log) if rank == 0 else None
    failure = None
    if lock is not None:
        try:
            lock.acquire()
        except CacheLockedError as e:
            failure = e
    if world > 1 and distributed.count_across(failure is not None, world, cfg.device):
        raise failure or BuildError("rank 0 could not take the cache's build lock (see its message)")
    if failure:
        raise failure
    try:
        yield lock
    finally:
        if lock is not None:
            lock.release()


def _overwrite(writer: CacheWriter, corpora: list[StreamedCorpus], teacher_id: str, log) -> None:
    m = writer.manifest
    same_corpora = m is not None and sorted((c.name, c.split, c.sha256) for c in m.corpora) == sorted(
        (c.name, c.split, c.sha256) for c in corpora
    )
    if m is not None and not same_corpora:
        log("--overwrite: the corpora changed; removing the whole cache")
        writer.drop(None)
    elif m is None and writer.store.exists("layers"):
        log("--overwrite: removing an unfinished build")
        writer.drop(None)
    else:
        log(f"--overwrite: removing the layer of teacher {teacher_id!r}")
        writer.drop(teacher_id)


def batches_by_length(lengths: list[int], max_words: int) -> list[list[int]]:
    """Indices sorted by length, cut so that batch size x longest length <= ``max_words``
    (a sentence longer than the budget runs alone)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    out, cur, longest = [], [], 0
    for i in order:
        n = lengths[i]
        if cur and (len(cur) + 1) * max(longest, n) > max_words:
            out.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        out.append(cur)
    return out


def _shards(plan: _Plan, mine: list[int], todo: list[int], examples) -> Iterator[tuple[int, list[dict]]]:
    """``(index, example rows)`` of this rank's shards in ``todo``, the corpora read again as they
    are needed (in the pipeline's reader thread). Each of this rank's examples shards that is not
    there yet is written on the way, before the teacher's shard, which is checked against it. The
    reading stops after the last shard needed."""
    todo_set, mine_set = set(todo), set(mine)
    needed = todo_set | {i for i in mine if not examples.is_committed(i)}
    if not needed:
        return
    last = max(needed)
    for index, rows in plan.shard_rows():
        if index in mine_set and not examples.is_committed(index):
            examples.write_shard(index, {k: [r[k] for r in rows] for k in rows[0]})
        if index in todo_set:
            yield index, rows
        if index == last:
            return


def _run_teacher(
    teacher: Teacher,
    plan: _Plan,
    shards: Iterator[tuple[int, list[dict]]],
    todo: list[int],
    layer,
    rank: int,
    projection: dict | None,
    log,
) -> StageTimes:
    """Compute the teacher's outputs for ``shards`` (``_shards``: those in ``todo``) and publish
    them, through the pipeline of ``stream.py``: a reader and tokenization workers ahead of the
    device, shard writers behind it (the columns are the plan's kind's, for its options).
    ``projection``: the layer's PCA (:func:`_read_projection`), applied to the hidden states
    before they are stored."""
    cfg, kind, schema = plan.cfg, plan.kind, plan.schema
    jobs = (
        (index, rows, batch)
        for index, rows in shards
        for batch in batches_by_length([r["n_words"] for r in rows], cfg.max_words_per_batch)
    )
    pipe = stream.pipeline_sizes(cfg.workers, cfg.writers, cfg.queue_size)
    log(pipe.describe())

    def prepare(rows: list[dict], batch: list[int]):
        words = [rows[i]["words"] for i in batch]
        return words, kind.gold_targets([rows[i] for i in batch], schema), teacher.prepare(words)

    def forward(prepared):
        words, gold, segments = prepared
        return teacher.outputs(
            words,
            gold,
            k=cfg.k,
            marginals=cfg.marginals,
            hidden_layers=cfg.hidden_layers,
            subwords=cfg.subwords,
            precision=cfg.precision,
            prepared=segments,
        )

    def columns(rows: list[dict], landed: list[tuple[list[int], dict]]) -> dict:
        outputs = [None] * len(rows)
        for batch, host in landed:
            for j, i in enumerate(batch):
                outputs[i] = (host, j)  # row i is item j of its batch's outputs
        return kind.shard_columns(rows, outputs, plan.options)

    total_words = int(sum(plan.shard_words[i] for i in todo))
    desc = f"teacher {layer.name}" + (f" [rank {rank}]" if rank else "")
    with tqdm(total=total_words, unit="word", unit_scale=True, desc=desc, smoothing=0.1) as bar:
        land = None if projection is None else (lambda host: _project_host(host, projection))
        stages = stream.Stages(prepare, forward, columns, layer.write_shard, land)
        return stream.run_pipeline(jobs, stages, pipe, teacher.device, bar)
