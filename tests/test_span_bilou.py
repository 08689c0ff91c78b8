"""A span teacher's per-type BILOU targets (issue 82): each type's own semi-CRF marginals as BILOU,
checked by hand on two words and by enumeration on five; the rnn recipe learns them from a span
layer, and refuses, by name and before writing anything, a span layer it cannot read."""

import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import toy_corpus
from test_span_teacher import TYPES, gliner_dir  # noqa: F401 (the fixture)

from seqdistill.bilou import span_layer_marginals
from seqdistill.cache_schema import CacheError, CacheReader

NEG = float("-inf")


def test_two_words_one_type_by_hand():
    """phi(0, 1 word) = log 2, phi(1, 1 word) = log 3, phi(0, 2 words) = log 4: the segmentations
    OO, UO, OU, UU, BL weigh 1, 2, 3, 6, 4 (Z = 16)."""
    phi = torch.tensor([[[[math.log(2)], [math.log(4)]], [[math.log(3)], [NEG]]]])  # [1, L=2, W=2, C=1]
    got = span_layer_marginals(phi, torch.tensor([2]))[0, :, 0]  # [L, 5]: O B I L U
    want = torch.tensor([[4, 4, 0, 0, 8], [3, 0, 0, 4, 9]], dtype=torch.float32) / 16
    torch.testing.assert_close(got, want.to(got.dtype))


def _brute_force(phi: np.ndarray, n: int) -> np.ndarray:
    """BILOU marginals [n, 5] of one type by enumerating its segmentations (spans up to W words)."""
    W = phi.shape[1]
    out, z = np.zeros((n, 5)), 0.0

    def segmentations(t):
        if t == n:
            yield []
            return
        for rest in segmentations(t + 1):
            yield [None, *rest]  # word t outside
        for w in range(min(W, n - t)):
            for rest in segmentations(t + w + 1):
                yield [(t, w), *rest]

    for seg in segmentations(0):
        score, tags = 0.0, []
        for s in seg:
            if s is None:
                tags.append(0)
            else:
                t, w = s
                score += phi[t, w]
                tags += [4] if w == 0 else [1] + [2] * (w - 1) + [3]
        p = math.exp(score)
        z += p
        for i, tag in enumerate(tags):
            out[i, tag] += p
    return out / z


def test_each_type_alone_matches_enumeration_and_types_keep_their_axis():
    rng = np.random.default_rng(3)
    L, W, C = 5, 3, 2
    phi = rng.normal(size=(2, L, W, C)).astype(np.float32)
    lengths = torch.tensor([5, 3])
    got = span_layer_marginals(torch.from_numpy(phi), lengths)
    assert got.shape == (2, L, C, 5)
    for b, n in enumerate(lengths.tolist()):
        for c in range(C):
            want = _brute_force(phi[b, :, :, c].astype(np.float64), n)
            np.testing.assert_allclose(got[b, :n, c].numpy(), want, atol=1e-5)
        assert torch.all(got[b, n:] == 0)
    np.testing.assert_allclose(got[..., :].sum(-1)[0].numpy(), np.ones((L, C)), atol=1e-5)
    swapped = span_layer_marginals(torch.from_numpy(phi[..., ::-1].copy()), lengths)
    torch.testing.assert_close(swapped, got.flip(2))  # the type axis is the potentials' own
    assert not torch.allclose(got[..., 0, :], got[..., 1, :])  # and the two types differ


@pytest.fixture(scope="module")
def span_cache(gliner_dir, tmp_path_factory):  # noqa: F811
    from seqdistill.cli.cache import main as cache_cli

    d = tmp_path_factory.mktemp("span-bilou")
    train, dev = toy_corpus(d / "train.txt", 24, 0), toy_corpus(d / "dev.txt", 8, 1)
    raw = toy_corpus(d / "raw.txt", 10, 2, labelled=False)
    args = ["build", "--out", str(d / "cache"), "--teacher", gliner_dir, "--entity-types", TYPES, "--kbest", "2"]
    args += ["--labelled", f"toy={train}@train", "--labelled", f"toy={dev}@dev", "--unlabelled", f"raw={raw}"]
    r = CliRunner().invoke(cache_cli, [*args, "--span-threshold", "0.4", "--device", "cpu"])
    assert r.exit_code == 0, r.output
    return str(d / "cache")


def test_the_rnn_recipe_learns_a_span_teachers_per_type_marginals(span_cache, tmp_path):
    from seqdistill.students.common import teacher_exports
    from seqdistill.students.recipes import train as train_student
    from seqdistill.students.recipes.rnn import Collate, RNNConfig, span_targets

    reader = CacheReader(span_cache)
    (teacher,) = reader.manifest.teachers
    span = span_targets(reader, teacher)
    dec = reader.manifest.teachers[teacher].decoding
    assert span == {"bias": dec["bias"], "temperature": dec["temperature"]} and dec["threshold"] == 0.4
    rows = list(reader.iter_examples({"examples": ["words"], teacher: ["span_logits"]}))[:6]
    batch = Collate(teacher_exports(reader, teacher).tokenizer, teacher, span)(rows)
    for b, row in enumerate(rows):  # each row's targets: its own span logits, through phi = (l + b) / T
        n = len(row["examples"]["words"])
        phi = (torch.as_tensor(np.asarray(row[teacher]["span_logits"], np.float32)) + span["bias"]) / span[
            "temperature"
        ]
        torch.testing.assert_close(batch.target[b, :n], span_layer_marginals(phi[None], torch.tensor([n]))[0])
    cfg = RNNConfig(cell="sru", rnn_layers=1, distill_epochs=2, epochs=1, device="cpu", batch_size=8)
    train_student(span_cache, tmp_path / "student", cfg, log=lambda *a: None)
    records = [json.loads(x) for x in (tmp_path / "student" / "metrics.jsonl").read_text().splitlines()]
    kl = [r["loss_kl"] for r in records if r["stage"] == "distil"]
    assert len(kl) == 2 and kl[1] < kl[0]  # the student moves toward the teacher's marginals
    extra = json.loads((tmp_path / "student" / "config.json").read_text())["extra"]
    assert extra["targets"] == "span marginals" and extra["teacher"] == teacher


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda layer, info: setattr(info, "decoding", {**info.decoding, "scheme": "BIOES"}), "scheme is 'BIOES'"),
        (lambda layer, info: setattr(info, "decoding", {**info.decoding, "temperature": 0}), "temperature > 0"),
        (
            lambda layer, info: setattr(info, "decoding", {k: v for k, v in info.decoding.items() if k != "bias"}),
            "bias",
        ),
        (
            lambda layer, info: setattr(layer, "fields", [f for f in layer.fields if f.name != "span_logits"]),
            "stores no span_logits",
        ),
    ],
)
def test_a_span_layer_the_head_cannot_read_is_refused_with_nothing_written(span_cache, tmp_path, edit, message):
    from seqdistill.students.recipes import train as train_student
    from seqdistill.students.recipes.rnn import RNNConfig

    reader = CacheReader(span_cache)
    (teacher,) = reader.manifest.teachers
    edit(reader.manifest.layers[teacher], reader.manifest.teachers[teacher])
    with pytest.raises(CacheError, match=message):
        train_student(reader, tmp_path / "x", RNNConfig(cell="sru", rnn_layers=1, device="cpu"), log=lambda *a: None)
    assert not (tmp_path / "x").exists()
