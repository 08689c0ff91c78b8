"""``distill-train``, ``distill-eval`` and ``distill-predict``: stage two's command line."""

from __future__ import annotations


import click

from .. import __version__
from ..cache_schema import CacheError

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _names(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(x for v in values for x in v.split(",") if x)


@click.command(context_settings=CONTEXT)
@click.version_option(__version__, prog_name="seqdistill")
@click.option("--cache", required=True, help="Cache directory or fsspec URL (from `distill-cache build`).")
@click.option("--out", "out_dir", required=True, help="Directory for the student.")
@click.option("--recipe", type=click.Choice(["mgkd"]), default="mgkd", show_default=True,
              help="mgkd: Multi-Grained KD (paper 000), BiLSTM-CRF student.")
@click.option("--teacher", default=None, help="Teacher layer to learn from (default: the cache's only one).")
@click.option("--losses", default="hard,seq-ce,fuzzy", show_default=True,
              help="Comma-separated: hard, seq-ce, fuzzy, token-em, token-pos.")
@click.option("--k", type=int, default=5, show_default=True, help="k-best paths used by seq-ce and fuzzy.")
@click.option("--weighting", type=click.Choice(["uncertainty", "fixed"]), default="uncertainty", show_default=True)
@click.option("--weights", default="", help="Fixed weights, comma-separated, one per loss.")
@click.option("--temperature", type=float, default=1.0, show_default=True, help="Token-level losses.")
@click.option("--train", "train_sets", multiple=True, help="CORPUS[/SPLIT] to train on (default: */train + unlabelled).")
@click.option("--unlabelled/--no-unlabelled", default=True, show_default=True,
              help="Add the cache's unlabelled corpora to the default training set (DA).")
@click.option("--dev", "dev_sets", multiple=True, help="CORPUS[/SPLIT] for early stopping (default: */dev, */valid).")
@click.option("--embedding", type=click.Choice(["teacher", "svd", "random"]), default="teacher", show_default=True)
@click.option("--embedding-dim", type=int, default=None, help="E for svd and random embeddings (default 100).")
@click.option("--train-embeddings", is_flag=True, help="Fine-tune the teacher's embeddings instead of freezing them.")
@click.option("--hidden-size", type=int, default=300, show_default=True)
@click.option("--dropout", type=float, default=0.5, show_default=True)
@click.option("--lr", type=float, default=1e-3, show_default=True)
@click.option("--epochs", type=int, default=50, show_default=True)
@click.option("--patience", type=int, default=5, show_default=True)
@click.option("--batch-size", type=int, default=32, show_default=True)
@click.option("--max-steps", type=int, default=None)
@click.option("--num-workers", type=int, default=0, show_default=True)
@click.option("--seed", type=int, default=13, show_default=True)
@click.option("--device", default=None)
@click.option("--checkpoint-every", type=int, default=200, show_default=True, help="Steps between checkpoints.")
@click.option("--resume", is_flag=True, help="Continue from OUT/checkpoint (same epoch, same step, no example twice).")
def train(cache, out_dir, recipe, teacher, losses, k, weighting, weights, temperature, train_sets, unlabelled, dev_sets,
          embedding, embedding_dim, train_embeddings, hidden_size, dropout, lr, epochs, patience, batch_size, max_steps,
          num_workers, seed, device, checkpoint_every, resume) -> None:
    """Train a small, fast student from a soft-label cache; no teacher is ever loaded.

    Example: distill-train --cache runs/cache --recipe mgkd --losses hard,seq-ce,fuzzy --k 5 --out runs/student
    """
    from .train import TrainConfig, train_student

    cfg = TrainConfig(recipe=recipe, teacher=teacher, losses=_names((losses,)), k=k, weighting=weighting,
                      weights=tuple(float(w) for w in _names((weights,))), temperature=temperature,
                      train=_names(train_sets), unlabelled=unlabelled, dev=_names(dev_sets), embedding=embedding,
                      embedding_dim=embedding_dim, freeze_embeddings=not train_embeddings, hidden_size=hidden_size,
                      dropout=dropout, lr=lr, epochs=epochs, patience=patience, batch_size=batch_size,
                      max_steps=max_steps, num_workers=num_workers, seed=seed, device=device,
                      checkpoint_every=checkpoint_every, resume=resume)
    if cfg.weights and len(cfg.weights) != len(cfg.losses):
        raise click.BadParameter(f"{len(cfg.weights)} weights for {len(cfg.losses)} losses", param_hint="--weights")
    try:
        summary = train_student(cache, out_dir, cfg, log=click.echo)
    except (CacheError, ValueError) as e:
        raise click.ClickException(str(e)) from None
    best = summary["best_dev_f1"]
    click.echo(f"best epoch {summary['best_epoch']}" + (f", dev F1 {100 * best:.2f}" if best is not None else "")
               + f"; student in {out_dir}")


main = train


if __name__ == "__main__":
    main()
