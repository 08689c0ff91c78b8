"""``distill-cache``: stage one's command line (a thin layer over functions users can call)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..cache_schema import CacheError, CacheReader, verify_cache
from ..cache_schema.info import cache_summary, format_summary
from ..cache_schema.storage import parse_storage_options
from ..config_fields import convert
from ..corpora import FORMATS, CorpusError, derive_label_schema, read_corpus
from ..pipeline.annotation_export import FORMATS as ANNOTATION_FORMATS
from ..pipeline.annotation_export import write_annotation_tasks
from ..pipeline.build import BuildConfig
from ..pipeline.select import STRATEGIES, select_rows, write_selection
from ..pipeline.vocabulary_check import vocabulary_problems
from ..teachers import KINDS, TeacherError
from ..teachers.finetune import FinetuneConfig
from ..teachers.pretrained import PretrainedError, gguf_source
from ..version import __version__
from .options import config_from, config_options, given_values, tag_names_option


def _storage_options(values: tuple[str, ...]) -> dict:
    try:
        return parse_storage_options(values)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--storage-option") from None


storage_option = click.option(
    "--storage-option",
    "storage_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="fsspec option for remote caches (e.g. endpoint_url=http://127.0.0.1:5000).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="seqdistill")
def main() -> None:
    """Stage one of seqdistill: build, inspect and verify soft-label caches.

    A cache holds what teachers say about every sentence of your corpora (k-best label paths with
    global probabilities, logits, CRF marginals, hidden layers) in Parquet and Zarr shards with a
    manifest.json. `distill-train --cache` trains students from it without loading any teacher.
    A cache is a local directory or an fsspec URL (s3://bucket/cache, memory://...).
    """


@main.command()
@click.argument("cache")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@storage_option
def info(cache: str, as_json: bool, storage_options: tuple[str, ...]) -> None:
    """Corpora, teachers, fields (with bytes per word) and shards of CACHE."""
    try:
        reader = CacheReader(cache, _storage_options(storage_options))
    except CacheError as e:
        raise click.ClickException(str(e)) from None
    summary = cache_summary(reader.manifest)
    click.echo(json.dumps(summary, indent=1) if as_json else format_summary(summary))


@main.command()
@click.argument("cache")
@click.option("--no-checksums", is_flag=True, help="Skip sha256 (sizes, schemas and alignment only).")
@click.option("--strict", is_flag=True, help="Stray files (not part of the cache) are errors, not warnings.")
@storage_option
def verify(cache: str, no_checksums: bool, strict: bool, storage_options: tuple[str, ...]) -> None:
    """Check CACHE end to end: checksums, schemas, every layer aligned with the examples, every
    header and marker file against the manifest, and files that belong to no part of the cache.

    A teacher layer that exported only the embedding rows its corpora use (the default) is checked
    to cover every subword its tokenizer gives the cache's words.

    Exits 1 and names each bad file, shard and field when something is wrong; stray files are
    warnings (exit 0) unless --strict.
    """
    found = verify_cache(cache, _storage_options(storage_options), checksums=not no_checksums, strict=strict)
    if not [p for p in found if not p.warning]:  # a sound cache: its trimmed vocabularies cover its words
        found += vocabulary_problems(CacheReader(cache, _storage_options(storage_options)))
    errors = [p for p in found if not p.warning]
    for p in found:
        click.echo(f"{'WARN' if p.warning else 'BAD'} {p}", err=True)
    if errors:
        click.echo(f"{cache}: {len(errors)} problem(s) found", err=True)
        sys.exit(1)
    click.echo(f"{cache}: OK" + (f" ({len(found)} warning(s))" if found else ""))


@main.command()
@click.argument("cache")
@click.option("--strategy", type=click.Choice(STRATEGIES), required=True, help="How rows are scored (see below).")
@click.option("--n", "n", type=int, required=True, help="Rows to pick.")
@click.option("--out", required=True, help="JSONL file of the picked rows, best first.")
@click.option("--teacher", "teachers", multiple=True, help="Teacher layer(s) to read (default: every one).")
@click.option("--corpus", "corpora", multiple=True, help="NAME[/SPLIT] to pick from (default: the unlabelled ones).")
@click.option(
    "--diversity",
    type=float,
    default=0.7,
    show_default=True,
    help="Skip rows more Jaccard-similar than this to a pick (1: off).",
)
@click.option("--seed", type=int, default=13, show_default=True, help="random: the draw's seed.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(ANNOTATION_FORMATS),
    default="rows",
    show_default=True,
    help="rows: JSONL of the picked rows; label-studio: tasks with the teachers' spans as predictions "
    "(and FILE.config.xml); spans: Prodigy/spaCy span JSONL.",
)
@storage_option
def select(cache, strategy, n, out, teachers, corpora, diversity, seed, fmt, storage_options) -> None:
    """Pick the N rows of CACHE most worth annotating next, from what the cache holds (no teacher
    is loaded): uncertainty (1 - the best path's probability), margin (1 - the gap between the two
    best paths), disagreement (words on which the teachers' best tags differ) or random.
    seqdistill/pipeline/select.py names every rule."""
    try:
        reader = CacheReader(cache, _storage_options(storage_options))
        picks = select_rows(
            reader, strategy, n, teachers=list(teachers), corpora=list(corpora), diversity=diversity, seed=seed
        )
        if fmt == "rows":
            write_selection(picks, out)
        else:
            write_annotation_tasks(reader, picks, list(teachers) or None, fmt, out)
    except CacheError as e:
        raise click.ClickException(str(e)) from None
    lo, hi = (picks[-1].score, picks[0].score) if picks else (0.0, 0.0)
    click.echo(f"{out}: {len(picks)} rows by {strategy} (scores {hi:.4f} to {lo:.4f})")


@main.command("word-table")
@click.argument("cache")
@click.option("--teacher", "teacher_dir", required=True, help="The teacher directory (the one the cache's layer ran).")
@click.option("--out", required=True, help="Directory to write: vectors.npy, words.txt, word_table.json.")
@click.option("--rows", type=int, default=100_000, show_default=True, help="Words kept, commonest first.")
@click.option("--dim", type=int, default=50, show_default=True, help="PCA dimensions of the table.")
@click.option(
    "--layer", type=int, default=None, help="The teacher's hidden layer (0: its embeddings) [default: the last]."
)
@click.option(
    "--exclude-split",
    "exclude_splits",
    multiple=True,
    default=("test",),
    show_default=True,
    help="Splits whose words stay out of the vocabulary (repeatable).",
)
@click.option(
    "--words", "extra_words", help="A word list to add after the corpora's words (a word a line, or .parquet)."
)
@click.option("--precision", default="auto", show_default=True, help="The teacher's precision, as build's.")
@click.option("--device", default=None, help="cpu, cuda... [default: cuda when there is one]")
@storage_option
def word_table(
    cache, teacher_dir, out, rows, dim, layer, exclude_splits, extra_words, precision, device, storage_options
) -> None:
    """A static word table made by the teacher (Model2Vec's way): each word of CACHE's corpora (all
    splits but --exclude-split) alone through the teacher, its state at --layer, reduced by PCA to
    --dim. A student reads it as `distill-train mgkd --word-vectors OUT` (with --hash-rows N: no word
    list). seqdistill/pipeline/word_table.py names every decision."""
    from ..pipeline.word_table import WordTableConfig, WordTableError, build_word_table

    cfg = WordTableConfig(rows, dim, layer, list(exclude_splits), extra_words, precision, device=device)
    try:
        report = build_word_table(cache, teacher_dir, out, cfg, _storage_options(storage_options), log=click.echo)
    except (WordTableError, CacheError, TeacherError) as e:
        raise click.ClickException(str(e)) from None
    click.echo(
        f"{report.out}: {report.words:,} words ({report.from_corpora:,} from the cache, "
        f"{report.from_extra:,} from --words), PCA keeps {100 * report.variance_kept:.1f}% of the variance"
    )


@main.command("check-corpus")
@click.argument("path")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True)
@click.option(
    "--scheme", default=None, help="Tag scheme (IOB1, IOB2, BIOES, BILOU, sBIO, BMES, BMEWO); detected if omitted."
)
@click.option("--unlabelled", is_flag=True, help="Ignore tags (raw text, or a labelled file used as transfer data).")
@click.option("--word-column", type=int, default=0, show_default=True, help="CoNLL: column of the word.")
@click.option("--tag-column", type=int, default=-1, show_default=True, help="CoNLL: column of the tag.")
@tag_names_option
def check_corpus(
    path: str, fmt: str, scheme: str | None, unlabelled: bool, word_column: int, tag_column: int, tag_names
) -> None:
    """Read a corpus as build would, and report its size, scheme and entity types.

    PATH is a CoNLL, JSONL, text or Parquet file, or hf:DIR[@SPLIT] (a datasets save_to_disk
    directory)."""
    try:
        corpus = read_corpus(
            path,
            "corpus",
            format=fmt,
            labelled=not unlabelled,
            scheme=scheme,
            word_column=word_column,
            tag_column=tag_column,
            tag_names=tag_names,
        )
    except CorpusError as e:
        raise click.ClickException(str(e)) from None
    click.echo(
        f"{corpus.path}: {len(corpus.sentences):,} sentences, {corpus.num_words:,} words, sha256 {corpus.sha256[:12]}"
    )
    for note in corpus.notes:
        click.echo(note)
    if corpus.labelled:
        from ..cache_schema import LabelSchema

        schema = LabelSchema.from_sequences([s.tags for s in corpus.sentences], corpus.scheme)
        click.echo(f"scheme {schema.scheme}, entity types: {', '.join(schema.entity_types)}")
    else:
        click.echo("unlabelled")


@main.command()
@click.option("--out", required=True, help="Cache directory or fsspec URL (s3://bucket/cache).")
@click.option(
    "--teacher",
    "teacher_dir",
    required=True,
    help="Teacher directory (from finetune-teacher, or a Hugging Face token-classification checkpoint), or the "
    "Hub id ORG/NAME of a token-classification model (fetched into the hub cache; HF_HUB_OFFLINE=1: the cache only).",
)
@click.option("--teacher-id", default=None, help="Name of the teacher's layer (default: the directory name).")
@click.option(
    "--labelled",
    multiple=True,
    metavar="NAME=PATH[@SPLIT]",
    help="Labelled corpus (split default: train). PATH may be hf:DIR, a datasets save_to_disk directory, whose "
    "DatasetDict split @SPLIT picks.",
)
@click.option(
    "--unlabelled", multiple=True, metavar="NAME=PATH[@SPLIT]", help="Unlabelled corpus (split default: unlabelled)."
)
@tag_names_option
@config_options(BuildConfig)
@storage_option
def build(out, teacher_dir, teacher_id, labelled, unlabelled, tag_names, storage_options, **options) -> None:
    """Run a teacher over labelled and unlabelled corpora and write its layer of the cache.

    The first build writes the examples layer and the teacher's layer; building again with another
    teacher adds its layer over the same examples. The same teacher again is a no-op; a killed build
    resumes when run again. Under torchrun, ranks split the shards. One build at a time writes a
    cache: a second one fails naming the first (or waits, with --wait); a dead build's lock is
    broken automatically.
    """
    from ..pipeline.build import BuildError, CorpusSpec, build_cache

    if not labelled and not unlabelled:
        raise click.UsageError("give at least one --labelled or --unlabelled corpus")
    cfg = config_from(BuildConfig, options, "distill-cache build")
    try:
        specs = [CorpusSpec.parse(x, True, tag_names) for x in labelled] + [
            CorpusSpec.parse(x, False, tag_names) for x in unlabelled
        ]
        build_cache(
            out,
            teacher_dir,
            specs,
            cfg,
            teacher_id=teacher_id,
            storage_options=_storage_options(storage_options),
            log=click.echo,
        )
    except (BuildError, CorpusError, CacheError, TeacherError) as e:
        raise click.ClickException(str(e)) from None


@main.command("finetune-teacher")
@click.option(
    "--encoder",
    "encoders",
    required=True,
    multiple=True,
    help="Pretrained model: a local Hugging Face directory, a hub name, or a GGUF file (model.gguf; the gguf "
    "extra) (repeat with --co-finetune).",
)
@click.option(
    "--gguf-file",
    default=None,
    help="The GGUF file inside --encoder (a directory or hub repository): the same as --encoder DIR/FILE.",
)
@click.option(
    "--co-finetune",
    is_flag=True,
    help="Fine-tune every --encoder together under one shared head (paper 002, §2.1); teacher i is "
    "saved to OUT/<last part of encoder i's path>.",
)
@click.option(
    "--train", "train_path", required=True, help="Labelled training corpus (CoNLL, JSONL, Parquet, hf:DIR[@SPLIT])."
)
@click.option("--dev", "dev_path", required=True, help="Labelled dev corpus, for early stopping on F1.")
@click.option("--test", "test_path", default=None, help="Labelled test corpus: scored with the best epoch at the end.")
@click.option("--out", "out_dir", required=True, help="Directory for the fine-tuned teacher.")
@click.option("--scheme", default=None, help="Tag scheme to train in (default: that of --train).")
@tag_names_option
@config_options(FinetuneConfig)
@click.option("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda if available).")
@click.option("--trust-remote-code", is_flag=True, help="Allow the encoder's own Python code to run (off by default).")
def finetune_teacher(
    encoders,
    gguf_file,
    co_finetune,
    train_path,
    dev_path,
    test_path,
    out_dir,
    scheme,
    tag_names,
    device,
    trust_remote_code,
    **options,
) -> None:
    """Fine-tune a teacher of any kind (--head) on a labelled corpus.

    Paper 000's recipe by default: layer-wise learning-rate decay 0.9 from the top block down,
    1e-3 for the head and CRF, dropout 0.5 on the encoder output, early stopping on dev F1. The
    output directory is a self-contained teacher for `distill-cache build --teacher DIR`.

    With --co-finetune and two or more --encoder, the encoders learn together under one shared
    linear layer (and CRF), the sum of their losses (paper 002, §2.1); each is saved as a plain
    teacher directory under OUT, ready for one `distill-cache build` each into the same cache.

    Killed at any point, the same command resumes from OUT/checkpoint and ends as an
    uninterrupted run would; the checkpoint is removed when the run ends.
    """
    from ..teachers import load_teacher
    from ..teachers.finetune import evaluate

    if len(encoders) > 1 and not co_finetune:
        raise click.UsageError("several --encoder are fine-tuned together only with --co-finetune")
    if gguf_file is not None:
        if len(encoders) > 1:
            raise click.UsageError("--gguf-file names the file inside one --encoder; give each as --encoder DIR/FILE")
        try:
            encoders = (gguf_source(encoders[0], gguf_file),)
        except PretrainedError as e:
            raise click.UsageError(str(e)) from None
    if co_finetune and (options.get("lora_rank") or options.get("freeze_embeddings") or options.get("freeze_layers")):
        raise click.UsageError(
            "--lora-rank, --freeze-embeddings and --freeze-layers fine-tune one teacher; not with --co-finetune"
        )
    head = options["head"]
    kind = KINDS[head]
    if co_finetune and (len(encoders) < 2 or not kind.co_finetune):
        able = ", ".join(k.name for k in KINDS.values() if k.co_finetune)
        raise click.UsageError(f"--co-finetune needs two or more --encoder and --head one of {able}")

    target = kind.target_scheme or scheme  # a kind's own scheme (SenT': sBIO): corpora are converted
    try:
        corpora = [
            read_corpus(train_path, "train", "train", scheme=scheme, tag_names=tag_names),
            read_corpus(dev_path, "dev", "dev", scheme=scheme, tag_names=tag_names),
        ]
        if test_path:
            corpora.append(read_corpus(test_path, "test", "test", scheme=scheme, tag_names=tag_names))
        schema, corpora = derive_label_schema(corpora, target)
        for c in corpora:
            c.check_labels(schema)
    except CorpusError as e:
        raise click.ClickException(str(e)) from None
    # the kind's paper's defaults (FinetuneConfig.for_head), then what the command line gives
    given = given_values(FinetuneConfig, options, only_given=True)
    given.pop("head", None)
    try:
        where = "distill-cache finetune-teacher"
        cfg = FinetuneConfig.for_head(head, **{k: convert(FinetuneConfig, k, v, where) for k, v in given.items()})
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    click.echo(
        f"label schema: {schema.scheme} over {', '.join(schema.entity_types)}; "
        f"{len(corpora[0].sentences):,} training sentences"
    )
    try:
        summary = _finetune(encoders, co_finetune, corpora, schema, out_dir, cfg, trust_remote_code, device)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    saved = summary["teachers"] if co_finetune else [str(out_dir)]
    if test_path:
        tests = {}
        for d in saved:
            best = load_teacher(d, trust_remote_code=trust_remote_code, device=device or _default_device())
            tests[d] = scores = evaluate(best, corpora[2].sentences)
            click.echo(
                f"test ({d}): P {100 * scores['precision']:.2f}  R {100 * scores['recall']:.2f}  "
                f"F1 {100 * scores['f1']:.2f}"
            )
        summary["test"] = tests[saved[0]] if not co_finetune else tests
        (Path(out_dir) / "training.json").write_text(json.dumps(summary, indent=1) + "\n")
    click.echo(
        f"best dev F1 {100 * summary['best_dev_f1']:.2f} at epoch {summary['best_epoch']}; "
        f"teacher{'s' if len(saved) > 1 else ''} in {', '.join(saved)}"
    )


def _finetune(encoders, co_finetune: bool, corpora, schema, out_dir, cfg, trust_remote_code: bool, device) -> dict:
    from ..teachers.cofinetune import cofinetune
    from ..teachers.finetune import finetune

    train, dev = corpora[0].sentences, corpora[1].sentences
    run, encoder = (cofinetune, list(encoders)) if co_finetune else (finetune, encoders[0])
    return run(
        encoder, train, dev, schema, out_dir, cfg, trust_remote_code=trust_remote_code, device=device, log=click.echo
    )


@main.command("in-context-teacher")
@click.option(
    "--model",
    required=True,
    help="A base decoder-only LM: a local Hugging Face directory or a GGUF file (the gguf extra). Its sha256 "
    "is recorded; the teacher directory holds no weights.",
)
@click.option(
    "--gguf-file", default=None, help="The GGUF file inside --model (a directory): the same as --model DIR/FILE."
)
@click.option(
    "--demos",
    "demos_path",
    required=True,
    help="Labelled corpus the demonstrations come from (CoNLL, JSONL, Parquet, hf:DIR[@SPLIT]).",
)
@click.option(
    "--n-demos",
    type=int,
    default=None,
    help="Demonstrations drawn from --demos with --seed (kept in file order); default: every sentence of "
    "--demos, in order. 0: the prompt alone.",
)
@click.option("--seed", type=int, default=13, show_default=True, help="Seed of the draw of --n-demos.")
@click.option("--out", "out_dir", required=True, help="Directory for the teacher.")
@tag_names_option
@click.option("--trust-remote-code", is_flag=True, help="Allow the model's own Python code to run (off by default).")
def in_context_teacher(model, gguf_file, demos_path, n_demos, seed, out_dir, tag_names, trust_remote_code) -> None:
    """Make a SenTScore teacher that needs no fine-tuning: a base LM with gold demonstrations in context.

    Every prompt starts with the demonstrations in SenT' form; their key/value cache is computed
    once and shared by every sentence and beam. The teacher is a `sentscore` teacher: `distill-cache
    build --teacher OUT`, `distill-eval` and `distill-train sentscore` take it as they take a
    fine-tuned one. The directory records the model's sha256 and the demonstrations
    (teachers/in_context.py says why it is a command of its own).
    """
    from ..teachers.prompted import make_in_context_teacher

    try:
        source = gguf_source(model, gguf_file)
        pool = read_corpus(demos_path, "demos", "train", tag_names=tag_names)
        schema, [pool] = derive_label_schema([pool], "sBIO")
        make_in_context_teacher(
            source, pool, schema, n_demos, seed, out_dir, trust_remote_code=trust_remote_code, log=click.echo
        )
    except (CorpusError, TeacherError, PretrainedError, ValueError) as e:
        raise click.ClickException(str(e)) from None


@main.command("server-teacher")
@click.option("--endpoint", required=True, help="The OpenAI-compatible API's base URL, e.g. http://127.0.0.1:8080/v1.")
@click.option("--model", required=True, help="The model's name on the server.")
@click.option(
    "--local-model",
    required=True,
    help="A local copy of the served model (a Hugging Face directory or GGUF file): its tokenizer renders the "
    "prompts and must match the server's, its embeddings are what students start from; its sha256 is recorded.",
)
@click.option("--demos", "demos_path", required=True, help="Labelled corpus the demonstrations come from.")
@click.option("--n-demos", type=int, default=None, help="Demonstrations drawn with --seed (default: all, in order).")
@click.option("--seed", type=int, default=13, show_default=True)
@click.option(
    "--api-key-env",
    default="OPENAI_API_KEY",
    show_default=True,
    help="Environment variable holding the API key (none is needed by a local server); never stored.",
)
@click.option("--max-concurrency", type=int, default=8, show_default=True, help="Requests in flight at most.")
@click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds a request may take.")
@click.option("--retries", type=int, default=5, show_default=True, help="Tries after the first (429, 5xx, timeouts).")
@click.option("--out", "out_dir", required=True, help="Directory for the teacher (and the journal of its answers).")
@tag_names_option
def server_teacher(
    endpoint,
    model,
    local_model,
    demos_path,
    n_demos,
    seed,
    api_key_env,
    max_concurrency,
    timeout,
    retries,
    out_dir,
    tag_names,
) -> None:
    """A SenTScore teacher whose LM answers behind an inference server (vLLM, SGLang, llama.cpp).

    Each allowed tag of each word is scored by the server's log-probabilities of the text it is
    given (echo), with the demonstrations of --demos in context; only the tag set can come out.
    Every answer is kept in OUT/answers.jsonl: a killed build resumes without asking the server
    again. teachers/server.py says how it approximates the local search.
    """
    from ..teachers.endpoint import EndpointConfig
    from ..teachers.prompted import make_server_teacher

    if max_concurrency < 1 or retries < 0 or timeout <= 0:
        raise click.UsageError("--max-concurrency must be 1 or more, --retries 0 or more, --timeout positive")
    cfg = EndpointConfig(endpoint, model, api_key_env, max_concurrency, timeout, retries)
    try:
        pool = read_corpus(demos_path, "demos", "train", tag_names=tag_names)
        schema, [pool] = derive_label_schema([pool], "sBIO")
        make_server_teacher(cfg, local_model, pool, schema, n_demos, seed, out_dir, log=click.echo)
    except (CorpusError, TeacherError, PretrainedError, ValueError) as e:
        raise click.ClickException(str(e)) from None


@main.command("split")
@click.argument("corpus_path", metavar="FILE")
@click.option("--out", "out_dir", required=True, help="Directory for train.txt, dev.txt and test.txt (CoNLL).")
@click.option(
    "--ratios",
    default="0.8,0.1,0.1",
    show_default=True,
    help="Shares of the sentences for train, dev and test (whole documents where the file marks them).",
)
@click.option("--seed", type=int, default=13, show_default=True)
@tag_names_option
def split_cmd(corpus_path, out_dir, ratios, seed, tag_names) -> None:
    """One labelled file (CoNLL, JSONL, Parquet, hf:DIR) into seeded train, dev and test files."""
    from ..corpora.splits import split_corpus

    try:
        shares = [float(x) for x in ratios.split(",")]
    except ValueError:
        raise click.BadParameter(f"{ratios!r}: three numbers, comma-separated", param_hint="--ratios") from None
    try:
        report = split_corpus(corpus_path, out_dir, shares, seed, tag_names=tag_names)
    except (CorpusError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    for name, r in report.items():
        docs = f", {r['documents']:,} documents" if r["documents"] is not None else ""
        click.echo(
            f"{name}: {r['path']}: {r['sentences']:,} sentences{docs}, {r['words']:,} words, {r['entities']:,} entities"
        )


@main.command("few-shot-split")
@click.option("--corpus", "corpus_path", required=True, help="Labelled corpus (CoNLL, JSONL, Parquet, hf:DIR[@SPLIT]).")
@click.option(
    "--out",
    "out_dir",
    required=True,
    help="Directory for gold_train.txt, gold_dev.txt, silver.txt (and gold_test.txt).",
)
@click.option("--train", "n_train", type=int, required=True, help="Gold training sentences (paper 004: 100 or 300).")
@click.option("--dev", "n_dev", type=int, required=True, help="Gold dev sentences (paper 004: 50 or 150).")
@click.option(
    "--test",
    "n_test",
    type=int,
    default=0,
    show_default=True,
    help="Also hold out this many sentences as gold_test.txt (a corpus without a test split).",
)
@click.option("--seed", type=int, default=13, show_default=True)
@tag_names_option
def few_shot_split_cmd(corpus_path, out_dir, n_train, n_dev, n_test, seed, tag_names) -> None:
    """Draw a small gold train/dev split; the rest of the corpus becomes silver text (labels hidden)."""
    from ..corpora.splits import few_shot_split

    try:
        paths = few_shot_split(corpus_path, out_dir, n_train, n_dev, seed, n_test, tag_names=tag_names)
    except CorpusError as e:
        raise click.ClickException(str(e)) from None
    for k, v in paths.items():
        click.echo(f"{k}: {v}")


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


if __name__ == "__main__":
    main()
