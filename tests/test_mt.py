"""The MT recipe (paper 002) and the transformer student, from a cache holding two teachers."""

import shutil

import pytest
import torch
from click.testing import CliRunner
from conftest import toy_corpus
from safetensors.torch import load, load_file

from seqdistill.cache_schema import CacheReader, LabelSchema
from seqdistill.cli.train import main as train_cli
from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
from seqdistill.students.archs import load_student
from seqdistill.students.recipes import train as train_mt_student
from seqdistill.students.recipes.mt import MTConfig, hidden_scales, teacher_layer_for
from seqdistill.teachers import build_teacher

SCHEMA = LabelSchema("IOB2", ("LOC", "PER"))


@pytest.fixture(scope="module")
def two_teacher_cache(tiny_encoder, tmp_path_factory):
    """Teacher "small" (2 layers, 32 wide, exports its first layer, over a trimmed vocabulary: the
    corpora's rows alone) and "wide" (3 layers, 48 wide, every row)."""
    from transformers import AutoConfig, BertConfig, BertModel

    d = tmp_path_factory.mktemp("mt")
    wide = d / "wide-encoder"
    shutil.copytree(tiny_encoder, wide)
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
    ).save_pretrained(wide)
    build_teacher(tiny_encoder, SCHEMA, "crf").save(d / "small")
    build_teacher(str(wide), SCHEMA, "softmax").save(d / "wide")
    specs = [
        CorpusSpec("toy", toy_corpus(d / "train.txt", 48, 0), "train", True),
        CorpusSpec("toy", toy_corpus(d / "dev.txt", 16, 1), "dev", True),
        CorpusSpec("raw", toy_corpus(d / "raw.txt", 16, 2, labelled=False), "unlabelled", False),
    ]
    cache = str(d / "cache")
    # a 2-layer student learns from layers 1, 2 of "small" and 2, 3 of "wide" (T*j, proportionally)
    build_cache(
        cache,
        str(d / "small"),
        specs,
        BuildConfig(
            device="cpu",
            k=2,
            hidden_layers=(1, 2),
            export_layers=1,
            shard_size=16,
            trim_vocabulary=True,
            frequent_subwords=0,
        ),
        teacher_id="small",
        log=lambda *a: None,
    )
    build_cache(
        cache,
        str(d / "wide"),
        specs,
        BuildConfig(device="cpu", hidden_layers=(2, 3), shard_size=16),
        teacher_id="wide",
        log=lambda *a: None,
    )
    return cache, d


def test_layer_mapping_is_t_times_j():
    assert [teacher_layer_for(j, 12, 4) for j in range(1, 5)] == [3, 6, 9, 12]
    assert [teacher_layer_for(j, 6, 4) for j in range(1, 5)] == [2, 3, 5, 6]  # 1.5 -> 2, 4.5 -> 5: half up
    assert [teacher_layer_for(j, 3, 2) for j in range(1, 3)] == [2, 3]


def test_transformer_student_starts_as_the_teachers_first_layers(two_teacher_cache, tmp_path):
    cache, d = two_teacher_cache
    summary = train_mt_student(
        cache,
        tmp_path / "s",
        MTConfig(teachers=("small",), student_layers=1, epochs=1, max_steps=1, lr=0.0, hidden_loss=False, device="cpu"),
        log=lambda *a: None,
    )
    assert summary["steps"] == 1
    student, _ = load_student(tmp_path / "s")
    teacher = load_file(str(d / "small" / "model.safetensors"))
    own = student.encoder.state_dict()
    w = "embeddings.word_embeddings.weight"
    ids = load(CacheReader(cache).read_export("small", "embeddings.safetensors"))["ids"]  # the rows the cache kept
    torch.testing.assert_close(own[w], torch.cat([teacher[w][ids], teacher[w][ids].mean(0, keepdim=True)]))
    for k in own:  # lr 0: the initial weights; the kept rows of the word embeddings and the UNK row (above)
        if k.startswith(("embeddings.", "encoder.layer.0.")) and k != w:
            torch.testing.assert_close(own[k], teacher[k], msg=k)
    assert not any(k.startswith("encoder.layer.1.") for k in own)
    scratch = train_mt_student(
        cache,
        tmp_path / "r",
        MTConfig(
            teachers=("small",),
            student_layers=1,
            epochs=1,
            max_steps=1,
            lr=0.0,
            init="scratch",
            hidden_loss=False,
            device="cpu",
        ),
        log=lambda *a: None,
    )
    assert scratch["steps"] == 1
    other, _ = load_student(tmp_path / "r")
    assert not torch.equal(other.encoder.state_dict()[w], own[w])


@pytest.mark.parametrize("soft_labels", ["mt", "ensemble"])
def test_mt_student_learns_from_two_teachers(two_teacher_cache, tmp_path, soft_labels):
    cache, _ = two_teacher_cache
    r = CliRunner().invoke(
        train_cli,
        [
            "--cache",
            cache,
            "--out",
            str(tmp_path / "mt"),
            "--recipe",
            "mt",
            "--teachers",
            "small,wide",
            "--student-layers",
            "2",
            "--init",
            "scratch",
            "--soft-labels",
            soft_labels,
            "--epochs",
            "8",
            "--lr",
            "3e-3",
            "--batch-size",
            "8",
            "--device",
            "cpu",
        ],
    )
    assert r.exit_code == 0, (r.output, r.exception)
    history = [line for line in r.output.splitlines() if "dev F1" in line]
    assert ("mt_dis" if soft_labels == "mt" else "ensemble") in history[0] and "mt_hid" in history[0]
    student, tok = load_student(tmp_path / "mt")
    assert student.config.arch == "transformer" and student.num_layers == 2
    from seqdistill.students.common import predict_tags

    pred = predict_tags(student, tok, [["peter", "visits", "paris"], ["anna", "visits", "the", "rome"]])
    assert [len(p) for p in pred] == [3, 4]
    import json

    runs = json.loads((tmp_path / "mt" / "training.json").read_text())
    assert runs["best_dev_f1"] > 0.5  # the toy task: names and cities
    # each epoch records eq. 2's mean weight per teacher over the rows trained on: 1 / (1 + gold NLL
    # per word) on labelled rows, 1 on unlabelled ones, recomputed here from the cache with pyarrow
    import pyarrow.dataset as ds

    root = two_teacher_cache[1] / "cache" / "layers"

    def records(layer):
        return ds.dataset(sorted(map(str, (root / layer).glob("shard-*/records.parquet"))), format="parquet")

    ex = records("examples").to_table(columns=["example_id", "split", "n_words"])
    info = dict(zip(ex["example_id"].to_pylist(), zip(ex["split"].to_pylist(), ex["n_words"].to_pylist())))
    for t in ("small", "wide"):
        layer = records(t).to_table(columns=["example_id", "gold_nll"])
        w = [
            1.0 if info[i][0] == "unlabelled" else 1.0 / (1.0 + nll / max(1, info[i][1]))
            for i, nll in zip(layer["example_id"].to_pylist(), layer["gold_nll"].to_pylist())
            if info[i][0] != "dev"
        ]
        for record in runs["history"]:
            assert record["teacher_weights"][t] == pytest.approx(sum(w) / len(w), rel=1e-5)
        assert sum(w) / len(w) < 0.99  # random teachers: their gold CE is far from 0
    from seqdistill.cli.evaluate import eval_main

    r = CliRunner().invoke(
        eval_main, ["--model", str(tmp_path / "mt"), "--data", toy_corpus(tmp_path / "t.txt", 10, 7), "--json"]
    )
    assert r.exit_code == 0, r.output


def test_hidden_scales_are_each_stored_layers_rms_over_the_first_shard(two_teacher_cache):
    """``--hidden-scale rms``: read back with zarr alone, as any reader of the cache would."""
    import numpy as np
    import zarr

    cache, d = two_teacher_cache
    fields = [["hidden_1", "hidden_2"], ["hidden_2", "hidden_3"]]
    got = hidden_scales(CacheReader(cache), ["small", "wide"], fields)
    for t, names, row in zip(["small", "wide"], fields, got):
        for name, scale in zip(names, row):
            values = zarr.open_array(str(d / "cache" / "layers" / t / "shard-00000" / "dense.zarr" / name), mode="r")
            want = np.sqrt(np.mean(np.square(np.asarray(values[:], dtype=np.float64))))
            assert scale == pytest.approx(want, rel=1e-5)
    assert got[0] != got[1]  # two teachers of different widths and weights: different scales


def test_clear_errors(two_teacher_cache, tmp_path):
    cache, _ = two_teacher_cache
    base = ["--cache", cache, "--out", str(tmp_path / "x"), "--recipe", "mt", "--device", "cpu", "--epochs", "1"]
    r = CliRunner().invoke(train_cli, [*base, "--teachers", "small,nope"])
    assert r.exit_code == 1 and "no teacher 'nope'; it holds: small, wide" in r.output
    r = CliRunner().invoke(train_cli, [*base, "--teachers", "wide", "--student-layers", "3", "--init", "scratch"])
    assert r.exit_code == 1 and "needs layers [1, 2, 3] of teacher 'wide'" in r.output and "--hidden-layers" in r.output
    r = CliRunner().invoke(train_cli, [*base, "--teachers", "wide", "--student-layers", "2"])
    assert r.exit_code == 1 and "--export-layers 2" in r.output


def test_long_sentences_are_cut_into_overlapping_windows(two_teacher_cache, tmp_path):
    """Past the encoder's 64 positions, overlapping windows of 62 subwords (stride 31): every word's
    states are those of the window where it has the most context, run alone (brute force over the
    windows); the sentence's ends come from the first and last windows; a short sentence in the
    same batch is unchanged."""
    cache, _ = two_teacher_cache
    train_mt_student(
        cache,
        tmp_path / "s",
        MTConfig(teachers=("small",), student_layers=1, epochs=1, max_steps=1, hidden_loss=False, device="cpu"),
        log=lambda *a: None,
    )
    student, tok = load_student(tmp_path / "s")
    words = ["peter", "visits", "paris"] * 50  # 150 words of one subword each, more than 62
    x = student.inputs(tok, [words, words[:3]])
    assert x.ids.shape[1] == 150
    layers = student.encode(x)
    assert layers[-1].shape[:2] == (2, 150)
    starts = [0, 31, 62, 88]  # stride 31; the last window ends at 150
    alone = [student.encode(student.inputs(tok, [words[s : s + 62]]))[-1][0] for s in starts]
    for p in range(150):
        inside = [i for i, s in enumerate(starts) if s <= p < s + 62]
        best = max(inside, key=lambda i: (min(p - starts[i], starts[i] + 61 - p), -i))
        torch.testing.assert_close(layers[-1][0, p], alone[best][p - starts[best]], rtol=1e-4, atol=1e-4)
    short = student.encode(student.inputs(tok, [words[:3]]))[-1][0]
    torch.testing.assert_close(layers[-1][1, :3], short, rtol=1e-4, atol=1e-4)


def test_mt_resumes_bit_identical_and_trains_under_torchrun(two_teacher_cache, tmp_path):
    from conftest import resumes_and_runs_under_torchrun

    cache, _ = two_teacher_cache
    resumes_and_runs_under_torchrun(
        "mt",
        cache,
        {
            "teachers": "small,wide",
            "student-layers": 2,
            "init": "scratch",
            "epochs": 2,
            "patience": 5,
            "batch-size": 8,
            "lr": 3e-3,
            "checkpoint-every": 3,
        },
        tmp_path,
        kill_at=10,
    )


def test_mt_student_trains_in_bf16_autocast_close_to_fp32(two_teacher_cache, tmp_path):
    """``--precision bf16`` (the transformer student's step about 1.8x faster on a CPU with
    AVX512-BF16): MT-Hid, MT-Dis and the CRF task loss of the first step within bf16's rounding of
    fp32's (the CRF's partition function stays fp32), and a checkpoint of the other precision is refused."""
    from dataclasses import replace

    cache, _ = two_teacher_cache
    one_step = MTConfig(
        teachers=("small", "wide"), student_layers=2, init="scratch", epochs=1, max_steps=1, batch_size=8, device="cpu"
    )
    first = {}
    for precision in ("fp32", "bf16"):
        cfg = replace(one_step, precision=precision)
        summary = train_mt_student(cache, tmp_path / precision, cfg, log=lambda *a: None)
        first[precision] = {k: v for k, v in summary["history"][0].items() if k.startswith("loss")}
    assert set(first["bf16"]) == set(first["fp32"]) >= {"loss", "loss_mt_hid", "loss_mt_dis", "loss_task"}
    for k, v in first["fp32"].items():
        assert first["bf16"][k] != v and first["bf16"][k] == pytest.approx(v, rel=0.05), k
    with pytest.raises(ValueError, match=r"another run \(precision was 'fp32', now 'bf16'\)"):
        cfg = replace(one_step, precision="bf16", max_steps=None)
        train_mt_student(cache, tmp_path / "fp32", cfg, log=lambda *a: None)
