"""Multi-teacher co-fine-tuning (paper 002, §2.1): one shared head, exact folding into plain teachers."""

import shutil

import pytest
import torch
from conftest import toy_corpus

from seqdistill.cache_schema import CacheReader, LabelSchema, verify_cache
from seqdistill.corpora import read_corpus
from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
from seqdistill.teachers import load_teacher
from seqdistill.teachers.cofinetune import co_groups, co_teachers, cofinetune, standalone, teacher_names
from seqdistill.teachers.finetune import FinetuneConfig

SCHEMA = LabelSchema("IOB2", ("LOC", "PER"))


@pytest.fixture(scope="module")
def wide_encoder(tiny_encoder, tmp_path_factory):
    """A second tiny encoder, wider and deeper than the first, with the same tokenizer."""
    from transformers import AutoConfig, BertConfig, BertModel

    d = tmp_path_factory.mktemp("wide-bert") / "wide"
    shutil.copytree(tiny_encoder, d)  # the tokenizer files; the model is replaced below
    torch.manual_seed(1)
    BertModel(
        BertConfig(
            vocab_size=AutoConfig.from_pretrained(tiny_encoder).vocab_size,
            hidden_size=48,
            num_hidden_layers=3,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
        )
    ).save_pretrained(d)
    return str(d)


def test_teachers_share_one_head_and_each_encoder_keeps_its_own_decay(tiny_encoder, wide_encoder):
    cfg = FinetuneConfig(head="crf")
    a, b = co_teachers([tiny_encoder, wide_encoder], SCHEMA, cfg)
    assert a.classifier.shared is b.classifier.shared and a.crf is b.crf
    assert isinstance(a.classifier.projection, torch.nn.Identity)
    assert tuple(b.classifier.projection.weight.shape) == (32, 48)  # wide -> the first encoder's size
    groups = co_groups([a, b], cfg)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len({id(p) for t in (a, b) for p in t.parameters()})
    assert groups[-1]["lr"] == cfg.head_lr


def test_cofinetuned_teachers_fold_exactly_and_build_into_one_cache(tiny_encoder, wide_encoder, tmp_path):
    train = read_corpus(toy_corpus(tmp_path / "train.txt", 40, 0), "toy", "train").sentences
    dev = read_corpus(toy_corpus(tmp_path / "dev.txt", 12, 1), "toy", "dev").sentences
    cfg = FinetuneConfig(head="crf", epochs=2, batch_size=8, lr=1e-3)
    logs = []
    summary = cofinetune(
        [tiny_encoder, wide_encoder], train, dev, SCHEMA, tmp_path / "co", cfg, device="cpu", log=logs.append
    )
    names = teacher_names([tiny_encoder, wide_encoder])
    assert summary["teachers"] == [str(tmp_path / "co" / n) for n in names]
    assert "dev_f1_each" in summary["history"][0] and len(summary["history"][0]["dev_f1_each"]) == 2
    loaded = [load_teacher(tmp_path / "co" / n) for n in names]
    # the saved teachers share the CRF, and each one's folded head equals its training-time head
    assert torch.equal(loaded[0].crf.transitions, loaded[1].crf.transitions)
    words = [s.words for s in dev[:5]]
    a, b = co_teachers([tiny_encoder, wide_encoder], SCHEMA, cfg)  # random heads: folding is exact for any
    for t in (a, b):
        t.eval()
        with torch.no_grad():
            t.classifier.shared.weight.normal_()
            if not isinstance(t.classifier.projection, torch.nn.Identity):
                t.classifier.projection.weight.normal_()
                t.classifier.projection.bias.normal_()
        plain = standalone(t)
        with torch.no_grad():
            torch.testing.assert_close(plain.encode(words).logits, t.encode(words).logits, rtol=1e-5, atol=1e-5)
    # both teachers go into one cache, one layer each, with their gold NLL for the MT-Dis weights
    specs = [CorpusSpec("toy", str(tmp_path / "train.txt"), "train", True)]
    for n in names:
        build_cache(
            str(tmp_path / "cache"),
            str(tmp_path / "co" / n),
            specs,
            BuildConfig(device="cpu", k=2),
            teacher_id=n,
            log=lambda *x: None,
        )
    reader = CacheReader(str(tmp_path / "cache"))
    assert set(reader.manifest.teachers) == set(names) and verify_cache(str(tmp_path / "cache")) == []
    nll = [reader.read_shard(0, {n: ["gold_nll"]}).get(n, "gold_nll").to_pylist() for n in names]
    assert all(v is not None and v > 0 for col in nll for v in col)


def test_names_are_safe_and_unique():
    assert teacher_names(["/x/mini-lm/", "hub/org:model", "/y/mini-lm"]) == ["mini-lm", "org-model", "mini-lm-2"]


def test_cli_co_finetunes_and_refuses_what_it_cannot(tiny_encoder, wide_encoder, tmp_path):
    from click.testing import CliRunner

    from seqdistill.cli.cache import main

    train, dev = toy_corpus(tmp_path / "train.txt", 24, 0), toy_corpus(tmp_path / "dev.txt", 8, 1)
    base = ["finetune-teacher", "--train", train, "--dev", dev, "--epochs", "1", "--batch-size", "8", "--device", "cpu"]
    r = CliRunner().invoke(
        main, [*base, "--encoder", tiny_encoder, "--encoder", wide_encoder, "--out", str(tmp_path / "x")]
    )
    assert r.exit_code == 2 and "only with --co-finetune" in r.output
    r = CliRunner().invoke(main, [*base, "--co-finetune", "--encoder", tiny_encoder, "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "two or more --encoder" in r.output
    r = CliRunner().invoke(
        main,
        [
            *base,
            "--co-finetune",
            "--encoder",
            tiny_encoder,
            "--encoder",
            wide_encoder,
            "--test",
            dev,
            "--out",
            str(tmp_path / "co"),
        ],
    )
    assert r.exit_code == 0, r.output
    for name in teacher_names([tiny_encoder, wide_encoder]):
        assert load_teacher(tmp_path / "co" / name).kind == "crf"
        assert f"test ({tmp_path / 'co' / name})" in r.output
