"""``distill-train``, ``distill-eval`` and ``distill-predict``: stage two's command line."""

from __future__ import annotations


import tempfile

import click

from .. import __version__
from ..cache_schema import CacheError, CacheReader
from ..cache_schema.storage import parse_storage_options

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _names(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(x for v in values for x in v.split(",") if x)


@click.command(context_settings=CONTEXT)
@click.version_option(__version__, prog_name="seqdistill")
@click.option("--cache", required=True, help="Cache directory or fsspec URL (from `distill-cache build`).")
@click.option("--out", "out_dir", required=True, help="Directory for the student.")
@click.option("--recipe", type=click.Choice(["mgkd", "xtremedistil", "sentscore", "mt", "rnn"]), default="mgkd",
              show_default=True,
              help="mgkd: Multi-Grained KD (paper 000), BiLSTM-CRF student. xtremedistil: paper 001, BiLSTM "
                   "tagger over subwords, logit and representation distillation. sentscore: paper 004, BiLSTM "
                   "tagger on a SenTScore teacher's pseudo-labels and tag scores. mt: MT-BERT (paper 002), a "
                   "K-layer transformer taught by several teachers at once. rnn: paper 003, a CNN + LSTM/SRU/SRU++ "
                   "student with one BILOU head per entity type.")
@click.option("--teacher", default=None, help="Teacher layer to learn from (default: the cache's only one).")
@click.option("--losses", default=None,
              help="Comma-separated. mgkd: hard, seq-ce, fuzzy, token-em, token-pos [hard,seq-ce,fuzzy]. "
                   "xtremedistil --schedule joint: ce, ll, rl [ce,ll].")
@click.option("--k", type=int, default=5, show_default=True, help="mgkd: k-best paths used by seq-ce and fuzzy.")
@click.option("--weighting", type=click.Choice(["uncertainty", "fixed"]), default="uncertainty", show_default=True,
              help="mgkd: learned (eq. 9) or fixed (eq. 8) loss weights.")
@click.option("--weights", default="", help="mgkd: fixed weights, comma-separated, one per loss.")
@click.option("--temperature", type=float, default=None,
              help="Distillation temperature [mgkd: 1, token-level losses; sentscore: 10, the teacher's scores].")
@click.option("--lambda-kl", type=float, default=1.0, show_default=True,
              help="sentscore: weight of the KL term (eq. 2); 0 trains on pseudo-labels alone.")
@click.option("--schedule", default="d4.2", show_default=True,
              help="xtremedistil: d0, d1, d2 (joint), d3.1, d3.2, d4.1, d4.2 (stage-wise; .2 = gradual "
                   "unfreezing; d3 = d3.2, d4 = d4.2), or joint with --losses.")
@click.option("--teacher-layer", type=int, default=None,
              help="xtremedistil: teacher hidden layer for the representation loss (default: the only one stored).")
@click.option("--alpha", type=float, default=1.0, show_default=True, help="xtremedistil: CE weight (eq. 7).")
@click.option("--beta", type=float, default=1.0, show_default=True, help="xtremedistil: RL weight (eq. 7).")
@click.option("--gamma", type=float, default=1.0, show_default=True, help="xtremedistil: LL weight (eq. 7).")
@click.option("--epochs-per-step", type=int, default=10, show_default=True,
              help="xtremedistil: most epochs of one stage or unfreezing step.")
@click.option("--teachers", default=None, help="mt: comma-separated teacher layers (default: every teacher in the cache).")
@click.option("--soft-labels", type=click.Choice(["mt", "ensemble", "none"]), default="mt", show_default=True,
              help="mt: teachers' soft labels weighted by 1/(1 + gold CE) (eq. 2), their uniform average, or none.")
@click.option("--hidden-loss/--no-hidden-loss", default=True, show_default=True,
              help="mt: the multi-teacher hidden loss (eq. 1; the cache must hold the matching teacher layers).")
@click.option("--student-layers", type=int, default=4, show_default=True, help="mt: K transformer layers.")
@click.option("--init", type=click.Choice(["teacher", "scratch"]), default="teacher", show_default=True,
              help="mt: start from the first K layers a teacher exported (build --export-layers K) or from scratch.")
@click.option("--init-from", default=None, help="mt: the teacher whose layers start the student (default: the first).")
@click.option("--head", type=click.Choice(["crf", "softmax"]), default="crf", show_default=True,
              help="mt: the transformer student's head.")
@click.option("--cell", type=click.Choice(["lstm", "sru", "sru++"]), default="sru++", show_default=True,
              help="rnn: the recurrent layers.")
@click.option("--rnn-layers", type=int, default=4, show_default=True, help="rnn: bidirectional recurrent layers.")
@click.option("--distill/--no-distill", default=True, show_default=True,
              help="rnn: stage 1, MSE to the teacher's BILOU logits (off: trained without distillation).")
@click.option("--distill-epochs", type=int, default=10, show_default=True, help="rnn: most epochs of stage 1.")
@click.option("--few-shot-types", default=None, help="rnn: entity types reported apart (macro F1 main / few-shot).")
@click.option("--train", "train_sets", multiple=True, help="CORPUS[/SPLIT] to train on (default: */train + unlabelled).")
@click.option("--unlabelled/--no-unlabelled", default=True, show_default=True,
              help="Add the cache's unlabelled corpora to the default training set (DA).")
@click.option("--unlabelled-sentences", type=int, default=None, metavar="N",
              help="Train on a seeded sample of N of the unlabelled sentences (the same every epoch; default: all).")
@click.option("--dev", "dev_sets", multiple=True, help="CORPUS[/SPLIT] for early stopping (default: */dev, */valid).")
@click.option("--embedding", type=click.Choice(["teacher", "svd", "random"]), default=None,
              help="Input embeddings [mgkd: teacher (frozen); xtremedistil, sentscore: svd].")
@click.option("--embedding-dim", type=int, default=None, help="E for svd and random [mgkd: 100; xtremedistil: 300; sentscore: 100].")
@click.option("--train-embeddings", is_flag=True, help="mgkd: fine-tune the teacher's embeddings instead of freezing them.")
@click.option("--hidden-size", type=int, default=None, help="LSTM units per direction [mgkd: 300; xtremedistil: 600; sentscore: 200].")
@click.option("--dropout", type=float, default=None, help="[mgkd: 0.5; xtremedistil: 0.2; sentscore: 0.5]")
@click.option("--lr", type=float, default=None, help="[mgkd, xtremedistil, sentscore: 1e-3; mt: 5e-5]")
@click.option("--epochs", type=int, default=None, help="Most epochs [mgkd: 50; sentscore: 100].")
@click.option("--patience", type=int, default=None,
              help="Epochs without gain that stop [mgkd: 5, dev F1; xtremedistil: 2 per step, validation loss; "
                   "sentscore: 25, dev F1].")
@click.option("--batch-size", type=int, default=None, help="Sentences per batch [mgkd: 32; xtremedistil: 512; sentscore: 16].")
@click.option("--max-steps", type=int, default=None, help="Most updates (xtremedistil: per epoch of a step).")
@click.option("--num-workers", type=int, default=0, show_default=True)
@click.option("--seed", type=int, default=13, show_default=True)
@click.option("--device", default=None)
@click.option("--checkpoint-every", type=int, default=200, show_default=True, help="mgkd: steps between checkpoints.")
@click.option("--storage-option", "storage_options", multiple=True, metavar="KEY=VALUE",
              help="fsspec option for a cache on object storage (e.g. endpoint_url=http://127.0.0.1:5000).")
@click.option("--local-cache", default=None, metavar="DIR",
              help="Cache on object storage: keep checked copies of the shard files read here (default: a "
                   "temporary directory for this run, so later epochs read locally).")
@click.option("--resume", is_flag=True, help="Continue from OUT/checkpoint (mgkd: same epoch and step, no example "
                                             "twice; xtremedistil: after the last finished step).")
def train(cache, out_dir, recipe, storage_options, local_cache, **o) -> None:
    """Train a small, fast student from a soft-label cache; no teacher is ever loaded.

    \b
    Examples:
      distill-train --cache runs/cache --recipe mgkd --losses hard,seq-ce,fuzzy --k 5 --out runs/mgkd
      distill-train --cache runs/cache --recipe xtremedistil --schedule d4 --teacher-layer 4 --out runs/xd
      distill-train --cache runs/sent-cache --recipe sentscore --lambda-kl 1 --out runs/sent
      distill-train --cache runs/cache --recipe mt --teachers minilm,mpnet --student-layers 4 --out runs/mt
      distill-train --cache runs/bilou-cache --recipe rnn --cell sru++ --out runs/csru
    """
    given = {k: o[k] for k in ("embedding", "embedding_dim", "hidden_size", "dropout", "patience", "batch_size", "lr",
                               "epochs") if o[k] is not None}
    common = dict(teacher=o["teacher"], train=_names(o["train_sets"]), unlabelled=o["unlabelled"],
                  unlabelled_sentences=o["unlabelled_sentences"],
                  dev=_names(o["dev_sets"]), max_steps=o["max_steps"], seed=o["seed"], device=o["device"],
                  resume=o["resume"], **given)
    with tempfile.TemporaryDirectory(prefix="seqdistill-mirror-") as tmp:
        try:
            reader = CacheReader(cache, parse_storage_options(storage_options), verify=True,
                                 local_cache=local_cache or tmp)
            summary = _train(reader, out_dir, recipe, common, o)
        except (CacheError, ValueError) as e:
            raise click.ClickException(str(e)) from None
    best = summary["best_dev_f1"]
    click.echo((f"best epoch {summary['best_epoch']}, " if "best_epoch" in summary else "")
               + (f"dev F1 {100 * best:.2f}; " if best is not None else "") + f"student in {out_dir}")


def _train(reader, out_dir, recipe: str, common: dict, o: dict) -> dict:
    """Build the recipe's config from the CLI options ``o`` and train."""
    temperature = {"temperature": o["temperature"]} if o["temperature"] is not None else {}
    if recipe == "sentscore":
        from .sentscore_kd import SentScoreKDConfig, train_sentscore_student

        cfg = SentScoreKDConfig(lambda_kl=o["lambda_kl"], **temperature, **common)
        return train_sentscore_student(reader, out_dir, cfg, log=click.echo)
    if recipe == "xtremedistil":
        from .xtremedistil import XtremeDistilConfig, train_xtremedistil

        if common.pop("epochs", None) is not None:
            raise click.UsageError("xtremedistil trains each stage or unfreezing step for --epochs-per-step")
        cfg = XtremeDistilConfig(schedule=o["schedule"], alpha=o["alpha"], beta=o["beta"], gamma=o["gamma"],
                                 teacher_layer=o["teacher_layer"], epochs_per_step=o["epochs_per_step"],
                                 **({"losses": _names((o["losses"],))} if o["losses"] else {}), **common)
        return train_xtremedistil(reader, out_dir, cfg, log=click.echo)
    if recipe == "mt":
        from .mt import MTConfig, train_mt_student

        if common.pop("teacher"):
            raise click.UsageError("the mt recipe takes --teachers A,B (several), not --teacher")
        for k in ("embedding", "embedding_dim", "hidden_size"):
            if common.pop(k, None) is not None:
                raise click.UsageError(f"--{k.replace('_', '-')} is for the BiLSTM recipes; mt sizes its "
                                       "transformer with --student-layers")
        cfg = MTConfig(teachers=_names((o["teachers"] or "",)), soft_labels=o["soft_labels"],
                       hidden_loss=o["hidden_loss"], student_layers=o["student_layers"], init=o["init"],
                       init_from=o["init_from"], head=o["head"], **temperature, **common)
        return train_mt_student(reader, out_dir, cfg, log=click.echo)
    if recipe == "rnn":
        from .rnn import RNNConfig, train_rnn_student

        for k in ("embedding", "embedding_dim"):
            if common.pop(k, None) is not None:
                raise click.UsageError(f"--{k.replace('_', '-')}: the rnn recipe uses the teacher's embeddings")
        cfg = RNNConfig(cell=o["cell"], layers=o["rnn_layers"], distill=o["distill"],
                        distill_epochs=o["distill_epochs"], few_shot_types=_names((o["few_shot_types"] or "",)),
                        **common)
        return train_rnn_student(reader, out_dir, cfg, log=click.echo)
    from .train import TrainConfig, train_student

    cfg = TrainConfig(recipe=recipe, losses=_names((o["losses"] or "hard,seq-ce,fuzzy",)), k=o["k"],
                      weighting=o["weighting"], weights=tuple(float(w) for w in _names((o["weights"],))),
                      temperature=1.0 if o["temperature"] is None else o["temperature"],
                      freeze_embeddings=not o["train_embeddings"], num_workers=o["num_workers"],
                      checkpoint_every=o["checkpoint_every"], **common)
    if cfg.weights and len(cfg.weights) != len(cfg.losses):
        raise click.BadParameter(f"{len(cfg.weights)} weights for {len(cfg.losses)} losses", param_hint="--weights")
    return train_student(reader, out_dir, cfg, log=click.echo)


@click.command("sweep", context_settings=CONTEXT)
@click.option("--cache", required=True, help="Cache directory or fsspec URL.")
@click.option("--grid", "grid_path", required=True, help="TOML grid: [base] options and [grid] axes (see sweep.py).")
@click.option("--out", "out_dir", required=True, help="Directory for the runs (one subdirectory each).")
@click.option("--jobs", type=int, default=1, show_default=True, help="Runs at once (processes).")
@click.option("--speed/--no-speed", default=True, show_default=True,
              help="After training, measure each student's parameters and latency (one at a time).")
def sweep_cmd(cache, grid_path, out_dir, jobs, speed) -> None:
    """Run every point of a grid of distill-train options over one cache; finished runs are skipped,
    so the same command resumes a killed sweep. `distill-train report OUT` tabulates it."""
    from .sweep import run_sweep

    try:
        results = run_sweep(cache, grid_path, out_dir, jobs, speed, log=click.echo)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    failed = [r for r in results if r["status"].startswith("failed")]
    if failed:
        raise click.ClickException(f"{len(failed)} of {len(results)} runs failed (see each run's sweep.log)")


@click.command("report", context_settings=CONTEXT)
@click.argument("out_dir")
@click.option("--plots", is_flag=True, help="Also write OUT/f1_vs_<axis>.png for every numeric axis, and "
                                           "f1_vs_latency.png, f1_vs_params.png (matplotlib).")
@click.option("--teacher-f1", type=float, default=None, help="Draw the teacher's F1 as a dashed line.")
def report_cmd(out_dir, plots, teacher_f1) -> None:
    """A Markdown table of a sweep: dev F1 as mean ± std over seeds, one row per grid point."""
    from pathlib import Path

    from .sweep import plot, report

    if not (Path(out_dir) / "sweep.json").exists():
        raise click.ClickException(f"{out_dir}: no sweep.json; run `distill-train sweep --out {out_dir}` first")
    click.echo(report(out_dir), nl=False)
    if plots:
        try:
            for path in plot(out_dir, teacher_f1):
                click.echo(f"plot: {path}")
        except ValueError as e:
            raise click.ClickException(str(e)) from None


main = train  # the click command (CliRunner and callers that want one)


def entry(argv: list[str] | None = None) -> None:
    """The ``distill-train`` program: ``distill-train [OPTIONS]`` trains one student;
    ``distill-train sweep|report ...`` run and tabulate a grid of them."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    commands = {"sweep": sweep_cmd, "report": report_cmd}
    if args and args[0] in commands:
        commands[args[0]].main(args[1:], prog_name=f"distill-train {args[0]}")
    else:
        train.main(args, prog_name="distill-train")


if __name__ == "__main__":
    entry()
