"""Span confidence (issue 37): ECE by hand, temperature against brute-force CRF marginals, fitted
temperatures stored and carried into exports, --min-score."""

import itertools
import json

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import toy_cache

from seqdistill.cache_schema import LabelSchema
from seqdistill.cli.evaluate import eval_main
from seqdistill.decode import Decoder
from seqdistill.deploy.calibration import GRID, expected_calibration_error, span_log_loss
from seqdistill.deploy.export import export_model
from seqdistill.inference import Tagger


def test_ece_by_hand():
    conf = np.array([0.9, 0.95, 0.1, 0.6])
    right = np.array([True, False, False, True])
    # bin 9: 2 spans, accuracy 0.5, confidence 0.925; bin 1: 0 vs 0.1; bin 6: 1 vs 0.6
    want = 2 / 4 * 0.425 + 1 / 4 * 0.1 + 1 / 4 * 0.4
    assert expected_calibration_error(conf, right) == pytest.approx(want)
    assert expected_calibration_error(np.array([]), np.array([], dtype=bool)) == 0.0
    assert span_log_loss(np.array([0.8, 0.4]), np.array([True, False])) == pytest.approx(
        -(np.log(0.8) + np.log(0.6)) / 2
    )
    assert 1.0 in GRID.round(12)  # the fit can keep the model as it is


def test_temperature_scales_crf_span_scores_as_brute_force_marginals_and_keeps_the_tags():
    schema = LabelSchema("IOB2", ("PER",))  # O, B-PER, I-PER
    rng = np.random.default_rng(0)
    trans, start, end = rng.normal(size=(3, 3)), rng.normal(size=3), rng.normal(size=3)
    trans[0, 2] = -np.inf  # O -> I-PER is forbidden in IOB2
    scores = rng.normal(size=(1, 3, 3)) * 3
    for t in (1.0, 2.5):
        d = Decoder("crf", schema, (trans, start, end), temperature=t)
        (out,) = d(scores, np.array([3]), with_scores=True)
        paths = list(itertools.product(range(3), repeat=3))
        pot = np.array(
            [
                start[p[0]] + end[p[-1]] + scores[0, np.arange(3), p].sum() + trans[p[0], p[1]] + trans[p[1], p[2]]
                for p in paths
            ]
        )
        prob = np.exp(pot / t - np.logaddexp.reduce(pot[np.isfinite(pot)] / t))
        best = paths[int(np.argmax(pot))]  # the tags are those of T = 1 whatever T is
        assert out.tags == schema.decode(list(best))
        for (s, e, _), score in zip(out.spans, out.scores):
            marg = [sum(p for p, q in zip(prob, paths) if q[i] == best[i]) for i in range(s, e)]
            assert score == pytest.approx(float(np.mean(marg)), abs=1e-5)


def test_fitted_temperature_is_stored_exported_and_min_score_drops_spans(tiny_encoder, tmp_path):
    from seqdistill.students.recipes import train as train_student
    from seqdistill.students.recipes.mgkd import MGKDConfig

    cache = toy_cache(tiny_encoder, tmp_path)
    # gold spans only, fast, so that the tiny student tags spans of its own (a random teacher's paths teach none)
    cfg = MGKDConfig(
        arch="bilstm-crf",
        losses=("hard",),
        unlabelled=False,
        lr=3e-2,
        epochs=20,
        max_steps=20,
        hidden_size=8,
        device="cpu",
    )
    train_student(cache, tmp_path / "s", cfg, log=lambda *a: None)
    dev = str(tmp_path / "dev.txt")
    args = ["--model", str(tmp_path / "s"), "--data", dev, "--calibration", "--json"]
    r = CliRunner().invoke(eval_main, [*args, "--fit-temperature", dev, "--plot-dir", str(tmp_path / "plots")])
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.output)
    assert row["spans"] > 0
    # fitted on the same data, T = 1 in the grid: the fitted log-loss is no worse than at T = 1
    from seqdistill.corpora import read_corpus
    from seqdistill.deploy.calibration import span_outcomes

    corpus = read_corpus(dev, "dev", "dev")
    outcomes = span_outcomes(
        Tagger.load(tmp_path / "s"), [s.words for s in corpus.sentences], [s.tags for s in corpus.sentences]
    )
    assert span_log_loss(*outcomes(row["fitted_temperature"])) <= span_log_loss(*outcomes(1.0)) + 1e-12
    # data in another scheme than the model's (BIOES against its IOB2) is read in the model's
    from seqdistill.deploy.calibration import calibrate

    bioes = tmp_path / "dev-bioes.txt"
    bioes.write_text(
        "\n\n".join("\n".join(f"{w} {t}" for w, t in zip(x.words, x.tags)) for x in corpus.to_scheme("BIOES").sentences)
    )
    assert any(t.startswith(("S-", "E-")) for x in corpus.to_scheme("BIOES").sentences for t in x.tags)
    (in_bioes,) = calibrate([str(tmp_path / "s")], str(bioes))
    (in_iob2,) = calibrate([str(tmp_path / "s")], dev)
    assert {**in_bioes, "model": 0} == {**in_iob2, "model": 0} and in_iob2["spans"] == row["spans"]
    assert (tmp_path / "plots" / "s-reliability.png").stat().st_size > 1000
    stored = json.loads((tmp_path / "s" / "calibration.json").read_text())
    assert stored["temperature"] == row["fitted_temperature"]
    torch_tagger = Tagger.load(tmp_path / "s")
    assert torch_tagger.backend.decoder.temperature == stored["temperature"]
    onnx = Tagger.load(export_model(tmp_path / "s", tmp_path / "onnx"))
    assert onnx.backend.decoder.temperature == stored["temperature"]
    text = ["peter visits the rome", "anna visits paris"]
    a, b = torch_tagger(text), onnx(text)
    assert [s.tags for s in a] == [s.tags for s in b]
    assert [sp.score for s in a for sp in s.spans] == pytest.approx([sp.score for s in b for sp in s.spans], abs=1e-4)
    r = CliRunner().invoke(
        eval_main, [*args[:4], "--calibration", "--fit-temperature", dev, "--model", str(tmp_path / "onnx")]
    )
    assert r.exit_code == 1 and "an exported directory is checked whole" in r.output
    # --min-score: spans below it go, and so do their tags
    scores = sorted(sp.score for s in a for sp in s.spans)
    if scores:
        cut = Tagger.load(tmp_path / "s", min_score=scores[-1] + 1e-9)(text)
        assert not any(s.spans for s in cut) and all(set(s.tags) == {"O"} for s in cut)
        some = torch_tagger(text, min_score=scores[0] + 1e-9)
        assert sum(len(s.spans) for s in some) == len(scores) - 1
