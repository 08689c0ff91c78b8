"""Does a span's confidence mean what it says (issue 37)? ``distill-eval --calibration``.

* **A span's confidence** is the decoder's span score (``seqdistill.decode``): the mean, over the
  span's words, of the probability of the tag chosen there — the CRF marginal for a CRF teacher or
  MGKD student, the softmax probability for softmax heads (XtremeDistil, SenTScore students,
  token teachers), the BILOU layer's probability for per-type models. SenTScore teachers give no
  span scores and are skipped.
* **Correct** means the span is a gold span: same words, same type (exact match, as span F1).
* **Expected calibration error** (ECE): predicted spans in ``BINS`` equal-width confidence bins,
  ``sum_b |B_b| / N * |accuracy(B_b) - confidence(B_b)|``. Only predicted spans count: a missed
  gold span has no confidence (recall is span F1's business).
* **Temperature scaling**: every score divided by one T (a CRF's transitions too) before the
  probabilities, the tags left as decoded at T = 1 (so F1 does not move). T is chosen on a dev set
  from a log grid of ``GRID`` values between 0.25 and 8 (1 included) as the one of lowest span
  log-loss (the cross-entropy between each span's confidence and whether it is correct: temperature
  scaling's usual objective, smooth where binned ECE is not; on the demo's 500-sentence dev, the ECE
  minimum overfitted and doubled the MGKD student's test ECE, docs/RESULTS.md). Scores are computed
  once; each T only re-decodes. T is stored as ``calibration.json`` in the model directory, which
  exports copy and every front end reads.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..corpora import read_corpus
from ..inference import Tagger
from ..inference.tagger import CALIBRATION_FILE, length_batches

BINS = 10
GRID = np.geomspace(0.25, 8.0, 41)


def span_outcomes(tagger: Tagger, sentences: list[list[str]], gold: list[list[str]], batch_size: int = 64):
    """The model's word scores of each batch (computed once) and a function of T giving every
    predicted span's confidence and whether it is a gold span."""
    from ..cache_schema.labels import tags_to_spans

    backend, decoder = tagger.backend, tagger.backend.decoder
    if decoder is None:
        raise ValueError(f"{tagger.name}: a {tagger.backend.what} teacher gives no span scores to calibrate")
    batches = [
        (idx, backend.scores([sentences[i] for i in idx]))
        for idx in length_batches([len(s) for s in sentences], batch_size)  # the Tagger's batches
    ]
    gold_spans = [set(tags_to_spans(t, decoder.schema.scheme)) for t in gold]

    def at(temperature: float) -> tuple[np.ndarray, np.ndarray]:
        kept = decoder.temperature
        decoder.temperature = temperature
        try:
            conf, right = [], []
            for idx, scores in batches:
                lengths = np.array([len(sentences[i]) for i in idx])
                for i, d in zip(idx, decoder(scores, lengths, with_scores=True)):
                    conf += d.scores
                    right += [span in gold_spans[i] for span in d.spans]
            return np.array(conf, dtype=np.float64), np.array(right, dtype=bool)
        finally:
            decoder.temperature = kept

    return at


def corpus_outcomes(tagger: Tagger, corpus):
    """:func:`span_outcomes` over a labelled corpus, its gold tags read in the model's own scheme
    (sBIO, BILOU...), so that gold and predicted spans are cut by the same rule."""
    gold = corpus.to_scheme(tagger.scheme).sentences
    return span_outcomes(tagger, [s.words for s in gold], [s.tags for s in gold])


def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, bins: int = BINS) -> float:
    """ECE over equal-width confidence bins (module docstring); 0 for no spans."""
    if len(confidence) == 0:
        return 0.0
    which = np.minimum((confidence * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        mask = which == b
        if mask.any():
            total += mask.sum() / len(confidence) * abs(correct[mask].mean() - confidence[mask].mean())
    return float(total)


def span_log_loss(confidence: np.ndarray, correct: np.ndarray) -> float:
    """Mean binary cross-entropy of span confidences against correctness; 0 for no spans."""
    if len(confidence) == 0:
        return 0.0
    c = np.clip(confidence, 1e-6, 1 - 1e-6)
    return float(-np.mean(np.where(correct, np.log(c), np.log1p(-c))))


def fit_temperature(outcomes) -> tuple[float, float]:
    """The grid temperature of lowest span log-loss, and the ECE it gives on the same data."""
    losses = [span_log_loss(*outcomes(t)) for t in GRID]
    best = float(GRID[int(np.argmin(losses))])
    return best, expected_calibration_error(*outcomes(best))


def reliability_diagram(curves: dict[str, tuple[np.ndarray, np.ndarray]], title: str, path) -> None:
    """Accuracy against confidence per bin, one line per curve (e.g. T = 1 and the fitted T)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="perfect")
    for label, (conf, right) in curves.items():
        which = np.minimum((conf * BINS).astype(int), BINS - 1)
        xs = [conf[which == b].mean() for b in range(BINS) if (which == b).any()]
        ys = [right[which == b].mean() for b in range(BINS) if (which == b).any()]
        ax.plot(xs, ys, marker="o", label=f"{label} (ECE {expected_calibration_error(conf, right):.3f})")
    ax.set_xlabel("span confidence")
    ax.set_ylabel("fraction of spans correct")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def calibrate(
    models: list[str],
    data: str,
    *,
    dev: str | None = None,
    plot_dir: str | None = None,
    threads: int | None = 1,
    device: str = "cpu",
) -> list[dict]:
    """For each model: span ECE on ``data`` at its current temperature and, with ``dev``, the
    temperature fitted there (written to the model directory's ``calibration.json``) and the ECE it
    gives on ``data``; a reliability diagram per model in ``plot_dir``."""
    test = read_corpus(data, "test", "test")
    dev_corpus = read_corpus(dev, "dev", "dev") if dev else None
    rows = []
    for model in models:
        tagger = Tagger.load(model, device=device, threads=threads or None)
        outcomes = corpus_outcomes(tagger, test)
        current = tagger.backend.decoder.temperature
        now = outcomes(current)
        row = {"model": model, "temperature": current, "ece": expected_calibration_error(*now), "spans": len(now[0])}
        curves = {f"T = {current:g}": now}
        if dev_corpus is not None:
            if (Path(model) / "export.json").exists():
                raise ValueError(
                    f"{model}: an exported directory is checked whole; fit the temperature on the model it came from, then export it"
                )
            fitted, dev_ece = fit_temperature(corpus_outcomes(tagger, dev_corpus))
            after = outcomes(fitted)
            row.update(fitted_temperature=fitted, dev_ece=dev_ece, ece_after=expected_calibration_error(*after))
            curves[f"T = {fitted:.3g} (fitted on dev)"] = after
            record = {
                "temperature": fitted,
                "fitted_on": str(dev),
                "dev_ece": dev_ece,
                "grid": [GRID[0], GRID[-1], len(GRID)],
            }
            (Path(model) / CALIBRATION_FILE).write_text(json.dumps(record, indent=1) + "\n")
        if plot_dir:
            Path(plot_dir).mkdir(parents=True, exist_ok=True)
            png = Path(plot_dir) / f"{Path(model).name}-reliability.png"
            reliability_diagram(curves, f"{Path(model).name} on {Path(data).name}", png)
            row["plot"] = str(png)
        rows.append(row)
    return rows


def format_calibration(rows: list[dict]) -> str:
    lines = ["| model | spans | T | ECE | fitted T | ECE after |", "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        after = (f"{r['fitted_temperature']:.3g}", f"{r['ece_after']:.4f}") if "fitted_temperature" in r else ("", "")
        lines.append(
            f"| {Path(r['model']).name} | {r['spans']} | {r['temperature']:g} | {r['ece']:.4f} | {after[0]} | {after[1]} |"
        )
    return "\n".join(lines)
