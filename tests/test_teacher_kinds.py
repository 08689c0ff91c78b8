"""Every registered teacher kind writes what it declares: the columns ``shard_columns`` makes from a
tiny teacher's outputs are the kind's fields, and the cache writer takes them as they are."""

import pytest
import torch
from conftest import toy_corpus

from seqdistill.cache_schema import CacheReader, CacheWriter, LabelSchema, TeacherInfo, verify_cache
from seqdistill.corpora import read_corpus
from seqdistill.teachers import KINDS, LayerOptions, build_teacher, to_host

SCHEMA = LabelSchema("IOB2", ("LOC", "PER"))


@pytest.fixture(scope="module")
def seq2seq_encoder(tmp_path_factory):
    """A tiny random BERT whose vocabulary has the [unusedN] sentinels SenTScore needs."""
    from transformers import BertConfig, BertModel, BertTokenizer

    d = tmp_path_factory.mktemp("kinds-s2s")
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        *(f"[unused{i}]" for i in range(12)),
        *"abcdefghijklmnopqrstuvwxyz",
        *("##" + c for c in "abcdefghijklmnopqrstuvwxyz"),
        "the",
        "peter",
        "anna",
        "visits",
        "paris",
        "rome",
        "loc",
        "per",
    ]
    BertTokenizer(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True).save_pretrained(d)
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=len(vocab),
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=128,
        )
    ).save_pretrained(d)
    return str(d)


def _teacher(kind, tiny_encoder, seq2seq_encoder):
    encoder = seq2seq_encoder if kind == "sentscore" else tiny_encoder
    return build_teacher(encoder, SCHEMA, kind).eval()


def _widest_options(kind, teacher) -> LayerOptions:
    """The most the kind accepts: every optional field if it can, else fewer (a span teacher's
    options name its types, as a build's --entity-types does)."""
    span = getattr(teacher, "span", None)
    for options in (
        LayerOptions(3, True, (0, 1), True, span=span),
        LayerOptions(3, True, (0, 1), span=span),
        LayerOptions(3, span=span),
    ):
        if kind.refusal(options) is None:
            return options
    raise AssertionError(f"kind {kind.name!r} refuses even the bare options")


@pytest.mark.parametrize("name", list(KINDS))
def test_shard_columns_are_the_declared_fields(name, tiny_encoder, seq2seq_encoder, tmp_path):
    kind = KINDS[name]
    teacher = _teacher(name, tiny_encoder, seq2seq_encoder)
    schema, options = teacher.schema, _widest_options(kind, teacher)
    labelled = read_corpus(toy_corpus(tmp_path / "train.txt", 3, 0), "toy", "train").to_scheme(schema.scheme)
    raw = read_corpus(toy_corpus(tmp_path / "raw.txt", 2, 1, labelled=False), "raw", "unlabelled", labelled=False)
    rows = labelled.example_rows() + raw.example_rows()

    out = teacher.outputs(
        [r["words"] for r in rows],
        kind.gold_targets(rows, schema),
        k=options.k,
        marginals=options.marginals,
        hidden_layers=options.hidden_layers,
        subwords=options.subwords,
        precision="fp32",
    )
    host = to_host(out)
    cols = kind.shard_columns(rows, [(host, j) for j in range(len(rows))], options)
    fields = kind.fields(schema, teacher.encoder.config.hidden_size, options)
    assert sorted(cols) == sorted(["example_id", *(f.name for f in fields)])

    # the writer checks every column against its field: dtype, per-unit shape, words, nulls
    writer = CacheWriter(str(tmp_path / "cache"))
    examples = writer.examples_layer(schema, [labelled.info(), raw.info()], 1)
    examples.write_shard(0, {k: [r[k] for r in rows] for k in rows[0]})
    info = TeacherInfo(
        name,
        name,
        {"weights": "a" * 64, "tokenizer": "b" * 64},
        kind.decoding(options, schema.scheme, "fp32"),
        list(options.hidden_layers),
        "first",
    )
    writer.teacher_layer(info, fields).write_shard(0, cols)
    writer.commit()
    assert verify_cache(str(tmp_path / "cache")) == []
    got = list(CacheReader(str(tmp_path / "cache")).iter_examples({name: ["gold_nll"]}))
    assert [g[name]["gold_nll"] is None for g in got] == [r["tags"] is None for r in rows]
