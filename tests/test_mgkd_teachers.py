"""`distill-train mgkd --teachers A,B` (issue 81): several teacher layers of one cache teach one
student, each teacher's losses mixed per sentence by its share (paper 002's eq. 2, normalised)."""

import dataclasses
import json
import math
import shutil

import pytest
import torch
from conftest import toy_cache

from seqdistill.cache_schema import CacheError, CacheReader, LabelSchema
from seqdistill.students.archs import load_student
from seqdistill.students.data import CacheStream, StreamConfig, parse_selection
from seqdistill.students.losses import teacher_shares
from seqdistill.students.recipes import train as train_student
from seqdistill.students.recipes.mgkd import Collate, MGKDConfig, loss_parts

SCHEMA = LabelSchema("IOB2", ("LOC", "PER"))
LOSSES = ("hard", "seq-ce", "fuzzy", "token-pos")


def test_teacher_shares_are_eq2_weights_normalised_by_hand():
    """w_i = 1 / (1 + CE_i) on labelled rows, 1 on unlabelled ones; a_i = w_i / sum_j w_j."""
    gold_ce = torch.tensor([[1.0, 0.0, 7.0, math.inf], [3.0, 0.0, 0.0, math.inf]])
    labelled = torch.tensor([True, True, False, True])
    got = teacher_shares(gold_ce, labelled, "mt")
    # row 0: w = 1/2, 1/4 -> 2/3, 1/3; row 1: w = 1, 1 -> 1/2 each; row 2 unlabelled: 1, 1;
    # row 3: both CEs infinite, w = 0, 0 -> shared evenly
    want = torch.tensor([[2 / 3, 0.5, 0.5, 0.5], [1 / 3, 0.5, 0.5, 0.5]])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(teacher_shares(gold_ce, labelled, "uniform"), torch.full((2, 4), 0.5))
    three = teacher_shares(torch.tensor([[0.0], [1.0], [3.0]]), torch.tensor([True]), "mt")
    torch.testing.assert_close(three[:, 0], torch.tensor([1.0, 0.5, 0.25]) / 1.75)
    with pytest.raises(ValueError, match="'mean': choose mt"):
        teacher_shares(gold_ce, labelled, "mean")


@pytest.fixture(scope="module")
def two_teachers(tiny_encoder, tmp_path_factory):
    """The toy cache with a second CRF teacher layer, 'other': other encoder weights (so other
    paths and gold NLLs) and a tokenizer of its own."""
    from transformers import BertModel

    from seqdistill.pipeline.build import BuildConfig, CorpusSpec, build_cache
    from seqdistill.teachers import build_teacher

    d = tmp_path_factory.mktemp("two-teachers")
    cache = toy_cache(tiny_encoder, d, k=4, shard_size=16)
    other = d / "other-encoder"
    shutil.copytree(tiny_encoder, other)
    torch.manual_seed(1)
    BertModel(BertModel.from_pretrained(tiny_encoder).config).save_pretrained(other)
    build_teacher(str(other), SCHEMA, "crf").save(d / "other-teacher")
    specs = [
        CorpusSpec("toy", str(d / "train.txt"), "train", True),
        CorpusSpec("toy", str(d / "dev.txt"), "dev", True),
        CorpusSpec("raw", str(d / "raw.txt"), "unlabelled", False),
    ]
    build_cache(
        cache,
        str(d / "other-teacher"),
        specs,
        BuildConfig(device="cpu", k=4, shard_size=16),
        teacher_id="other",
        log=print,
    )
    return cache


class _Rows:
    def __init__(self, rows):
        self.rows = rows


def _rows(reader, teachers, n=200):
    """Example rows of the training text (gold and unlabelled), with what every loss reads."""
    fields = {"examples": ["words", "tags"]}
    for t in teachers:
        fields[t] = ["kbest_paths", "kbest_log_probs", "marginals", "gold_nll"]
    stream = CacheStream(reader, fields, parse_selection(["toy/train", "raw"], reader), _Rows, StreamConfig(n, n, 5))
    return next(iter(stream)).rows


def test_two_teachers_losses_are_each_teachers_mixed_by_their_shares(two_teachers):
    """Every loss part of a sentence is a_tiny * (its loss under 'tiny' alone) + a_other * (under
    'other' alone), a from the cached gold NLLs by hand: the mixture, not one teacher's."""
    from seqdistill.students.archs.bilstm_crf import BiLSTMCRF, BiLSTMCRFConfig
    from seqdistill.students.common import teacher_exports

    reader = CacheReader(two_teachers)
    rows = _rows(reader, ["tiny", "other"])
    exports = teacher_exports(reader, "tiny")
    weight = exports.student_weight()
    torch.manual_seed(0)
    model = BiLSTMCRF(BiLSTMCRFConfig(SCHEMA.to_json(), weight.shape[0], weight.shape[1], hidden_size=8))
    model.eval()
    cfg = MGKDConfig(teachers=("tiny", "other"), losses=LOSSES, k=4, chars=False)
    alone = {t: Collate(exports.tokenizer, SCHEMA, t, cfg, "crf") for t in ("tiny", "other")}
    both = Collate(exports.tokenizer, SCHEMA, ["tiny", "other"], cfg, ["crf", "crf"])
    differ = {"labelled": 0, "unlabelled": 0}
    for row in rows:
        words = row["examples"]["words"]
        labelled = row["examples"]["tags"] is not None
        w = {t: 1 / (1 + row[t]["gold_nll"] / len(words)) if labelled else 1.0 for t in ("tiny", "other")}
        share = {t: w[t] / (w["tiny"] + w["other"]) for t in w}
        batch = both([row])
        torch.testing.assert_close(batch.shares[:, 0], torch.tensor([share["tiny"], share["other"]]))
        with torch.no_grad():
            mixed = loss_parts(model, batch, cfg, "cpu")
            each = {t: loss_parts(model, alone[t]([row]), cfg, "cpu") for t in alone}
        assert set(mixed) == set(LOSSES)
        for name in LOSSES:
            want = share["tiny"] * each["tiny"][name] + share["other"] * each["other"][name]
            torch.testing.assert_close(mixed[name], want, rtol=1e-5, atol=1e-6)
        if abs(float(each["tiny"]["seq-ce"] - each["other"]["seq-ce"])) > 1e-3:
            differ["labelled" if labelled else "unlabelled"] += 1
        if labelled:  # gold is the hard label whoever teaches
            torch.testing.assert_close(each["tiny"]["hard"], each["other"]["hard"])
    assert differ["labelled"] > 0 and differ["unlabelled"] > 0  # the two teachers teach differently


def test_a_student_of_two_teachers_records_them_and_their_shares_per_epoch(two_teachers, tmp_path):
    run = MGKDConfig(teachers=("tiny", "other"), k=3, epochs=2, max_steps=4, device="cpu", batch_size=16)
    train_student(two_teachers, tmp_path / "both", run, log=lambda *a: None)
    extra = json.loads((tmp_path / "both" / "config.json").read_text())["extra"]
    assert extra["teachers"] == ["tiny", "other"] and extra["teacher_shares"] == "mt"
    assert extra["embeddings_teacher"] == "tiny" and "teacher" not in extra
    records = [json.loads(line) for line in (tmp_path / "both" / "metrics.jsonl").read_text().splitlines()]
    shares = [r["teacher_shares"] for r in records if "teacher_shares" in r]
    assert shares and all(set(s) == {"tiny", "other"} and abs(sum(s.values()) - 1) < 1e-6 for s in shares)
    assert all(0 < s["tiny"] < 1 for s in shares)


def test_one_teacher_through_teachers_trains_the_same_student_as_teacher(two_teachers, tmp_path):
    """--teachers A is --teacher A: the same weights, bit for bit, and the same config."""
    common = dict(k=3, epochs=1, max_steps=3, device="cpu", batch_size=16)
    train_student(two_teachers, tmp_path / "one", MGKDConfig(teacher="other", **common), log=lambda *a: None)
    train_student(two_teachers, tmp_path / "list", MGKDConfig(teachers=("other",), **common), log=lambda *a: None)
    a, _ = load_student(tmp_path / "one")
    b, _ = load_student(tmp_path / "list")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    configs = [json.loads((tmp_path / d / "config.json").read_text()) for d in ("one", "list")]
    assert configs[0] == configs[1] and configs[0]["extra"]["teacher"] == "other"


def _refused(cache, tmp_path, match, **kw):
    out = tmp_path / "refused"
    with pytest.raises((CacheError, ValueError), match=match):
        train_student(cache, out, MGKDConfig(epochs=1, max_steps=1, device="cpu", **kw), log=lambda *a: None)
    assert not out.exists()  # refused before anything is written


def test_teachers_refused_by_name_with_nothing_written(two_teachers, tmp_path):
    _refused(two_teachers, tmp_path, r"no teacher 'big'; it holds: tiny, other", teachers=("tiny", "big"))
    with pytest.raises(ValueError, match=r"--teachers names 'tiny' more than once"):
        MGKDConfig(teachers=("tiny", "other", "tiny"))
    with pytest.raises(ValueError, match=r"--teacher tiny and --teachers tiny,other: give one of them"):
        MGKDConfig(teacher="tiny", teachers=("tiny", "other"))


def _edited(cache, edit):
    """A reader of ``cache`` whose manifest says what ``edit`` makes it say of teacher 'other'."""
    reader = CacheReader(cache)
    edit(reader.manifest.layers["other"], reader.manifest.teachers["other"])
    return reader


def test_a_teacher_layer_without_a_losss_field_or_with_other_tags_is_refused(two_teachers, tmp_path):
    def drop_marginals(layer, info):
        layer.fields = [f for f in layer.fields if f.name != "marginals"]

    def other_tags(layer, info):
        layer.fields = [dataclasses.replace(f, shape=(7,)) if f.name == "marginals" else f for f in layer.fields]

    def other_scheme(layer, info):
        info.decoding = {**info.decoding, "scheme": "BILOU"}

    def no_gold_nll(layer, info):
        layer.fields = [f for f in layer.fields if f.name != "gold_nll"]

    both = ("tiny", "other")
    cases = [
        (drop_marginals, r"teacher 'other' \(crf\) does not store what these losses read: token-pos reads marginals"),
        (other_tags, r"teacher 'other': its field marginals has \(7,\) values a word where .* has 5 tags"),
        (other_scheme, r"teacher 'other' decoded its paths in the BILOU scheme, the cache's label schema is IOB2"),
        (no_gold_nll, r"teacher 'other' stores no gold_nll, which --teacher-shares mt reads"),
    ]
    for edit, match in cases:
        _refused(_edited(two_teachers, edit), tmp_path, match, teachers=both, losses=LOSSES, k=4)
    # uniform shares read no gold NLL
    reader = _edited(two_teachers, no_gold_nll)
    run = MGKDConfig(teachers=both, teacher_shares="uniform", k=4, epochs=1, max_steps=1, device="cpu")
    train_student(reader, tmp_path / "uniform", run, log=lambda *a: None)
    assert (tmp_path / "uniform" / "model.safetensors").exists()


def test_confidence_shares_are_best_path_probabilities_normalised_by_hand():
    """a_i = P_i(y*_i | x) / sum_j P_j(y*_j | x) from each teacher's best-path log-probability."""
    from seqdistill.students.losses import confidence_shares

    p = torch.tensor([[0.9, 0.5, 0.2, 0.0], [0.5, 0.5, 0.6, 0.0]])
    got = confidence_shares(p.log())
    # row 0: 0.9 / 1.4, 0.5 / 1.4; row 1: even; row 2: 0.2 / 0.8, 0.6 / 0.8; row 3: no finite
    # probability (log 0 = -inf for both) -> shared evenly
    want = torch.tensor([[9 / 14, 0.5, 0.25, 0.5], [5 / 14, 0.5, 0.75, 0.5]])
    torch.testing.assert_close(got, want)
    three = confidence_shares(torch.tensor([[0.6], [0.3], [0.1]]).log())
    torch.testing.assert_close(three[:, 0], torch.tensor([0.6, 0.3, 0.1]))


def test_confidence_shares_every_row_by_the_cached_best_paths(two_teachers, tmp_path):
    """Under --teacher-shares confidence each row's shares are its teachers' cached top-path
    probabilities normalised, labelled or not, and the run records both kinds of row per epoch."""
    from seqdistill.students.common import teacher_exports

    reader = CacheReader(two_teachers)
    rows = _rows(reader, ["tiny", "other"])
    exports = teacher_exports(reader, "tiny")
    cfg = MGKDConfig(teachers=("tiny", "other"), teacher_shares="confidence", k=4, chars=False)
    both = Collate(exports.tokenizer, SCHEMA, ["tiny", "other"], cfg, ["crf", "crf"])
    uneven = {True: 0, False: 0}
    for row in rows:
        p = {t: math.exp(row[t]["kbest_log_probs"][0]) for t in ("tiny", "other")}
        want = torch.tensor([p["tiny"], p["other"]]) / (p["tiny"] + p["other"])
        got = both([row]).shares[:, 0]
        torch.testing.assert_close(got, want)
        uneven[row["examples"]["tags"] is not None] += abs(float(got[0]) - 0.5) > 1e-3
    assert uneven[True] > 0 and uneven[False] > 0  # gold rows and unlabelled rows alike
    run = dataclasses.replace(cfg, chars=True, epochs=2, max_steps=4, device="cpu", batch_size=16)
    train_student(two_teachers, tmp_path / "confident", run, log=lambda *a: None)
    assert json.loads((tmp_path / "confident" / "config.json").read_text())["extra"]["teacher_shares"] == "confidence"
    records = [json.loads(line) for line in (tmp_path / "confident" / "metrics.jsonl").read_text().splitlines()]
    for key in ("teacher_shares", "teacher_shares_unlabelled"):
        seen = [r[key] for r in records if key in r]
        assert seen and all(abs(sum(s.values()) - 1) < 1e-6 and s["tiny"] != 0.5 for s in seen)


def test_confidence_shares_refuse_a_teacher_without_path_probabilities(two_teachers, tmp_path):
    def no_log_probs(layer, info):
        layer.fields = [f for f in layer.fields if f.name != "kbest_log_probs"]

    match = r"teacher 'other' stores no kbest_log_probs, which --teacher-shares confidence reads"
    _refused(
        _edited(two_teachers, no_log_probs),
        tmp_path,
        match,
        teachers=("tiny", "other"),
        teacher_shares="confidence",
        losses=("hard", "token-pos"),  # no loss of its own reads the paths: the shares are what refuse
        k=4,
    )
