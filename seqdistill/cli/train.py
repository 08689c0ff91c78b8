"""``distill-train``: stage two's command line, one command per recipe (generated from its config)."""

from __future__ import annotations

import dataclasses
import tempfile

import click
from click.core import ParameterSource

from ..cache_schema import CacheError, CacheReader
from ..cache_schema.storage import parse_storage_options
from ..students.config import make_config, read_toml
from ..students.recipes import recipes
from ..version import __version__
from .options import field_option

CONTEXT = {"help_option_names": ["-h", "--help"]}


def _recipe_command(recipe) -> click.Command:
    """``distill-train RECIPE``: the run options, then one option per field of the recipe's config
    (``config.option``), so help and defaults come from the dataclass."""
    params = [
        click.Option(["--cache"], help="Cache directory or fsspec URL (from `distill-cache build`)."),
        click.Option(
            ["--out", "out_dir"], help="Directory for the student (and its checkpoint, records, config.toml)."
        ),
        click.Option(
            ["--config", "config_path"],
            metavar="TOML",
            help="Options from a TOML file (the same keys; OUT/config.toml reproduces a run); options "
            "given here override it.",
        ),
        click.Option(
            ["--storage-option", "storage_options"],
            multiple=True,
            metavar="KEY=VALUE",
            help="fsspec option for a cache on object storage (e.g. endpoint_url=http://127.0.0.1:5000).",
        ),
        click.Option(
            ["--local-cache"],
            metavar="DIR",
            help="Cache on object storage: keep checked copies of the shard files read here (default: a "
            "temporary directory for this run, so later epochs read locally).",
        ),
    ]
    for f in dataclasses.fields(recipe.config):
        params.append(field_option(recipe.config, f))
    return _RecipeCommand(
        recipe.name,
        params=params,
        callback=lambda **o: _run(recipe, o),
        help=recipe.help + "\n\nNo teacher is ever loaded: the student learns from the cache alone.",
        context_settings=CONTEXT,
    )


class _RecipeCommand(click.Command):
    """A recipe's command, whose unknown options are named with the recipes they belong to."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as e:
            owners = [
                r.name
                for r in recipes().values()
                if any(
                    f.name.replace("_", "-") == e.option_name.lstrip("-").removeprefix("no-")
                    for f in dataclasses.fields(r.config)
                )
            ]
            if owners:
                raise click.UsageError(
                    f"{e.option_name} is an option of the {', '.join(owners)} recipe"
                    f"{'s' if len(owners) > 1 else ''}, not of {self.name}; "
                    f"see distill-train {self.name} --help",
                    ctx,
                ) from None
            raise


def _run(recipe, o: dict) -> None:
    ctx = click.get_current_context()
    given = {k for k in o if ctx.get_parameter_source(k) == ParameterSource.COMMANDLINE}
    values = {}
    if o["config_path"]:
        try:
            values = read_toml(o["config_path"])
        except ValueError as e:
            raise click.ClickException(str(e)) from None
        if values.pop("recipe", recipe.name) != recipe.name:
            raise click.UsageError(
                f"{o['config_path']} is a config of another recipe; run it with "
                f"`distill-train --config {o['config_path']}`"
            )
    cache = o["cache"] or values.pop("cache", None)
    out_dir = o["out_dir"] or values.pop("out", None)
    values.pop("cache", None), values.pop("out", None)
    if not cache or not out_dir:
        raise click.UsageError("--cache and --out are required (on the command line or in --config)")
    run_keys = {"cache", "out_dir", "config_path", "storage_options", "local_cache"}
    for k in given - run_keys:
        values[k] = ",".join(o[k]) if isinstance(o[k], tuple) else o[k]
    try:
        cfg = make_config(recipe.config, values, o["config_path"] or "distill-train")
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    with tempfile.TemporaryDirectory(prefix="seqdistill-mirror-") as tmp:
        try:
            reader = CacheReader(
                cache, parse_storage_options(o["storage_options"]), verify=True, local_cache=o["local_cache"] or tmp
            )
            summary = recipe.train(reader, out_dir, cfg, log=click.echo)
        except (CacheError, ValueError) as e:
            raise click.ClickException(str(e)) from None
    best = summary["best_dev_f1"]
    click.echo(
        (f"best epoch {summary['best_epoch']}, " if summary.get("best_epoch") is not None else "")
        + (f"dev F1 {100 * best:.2f}; " if best is not None else "")
        + f"student in {out_dir}"
    )


@click.command("sweep", context_settings=CONTEXT)
@click.option("--cache", required=True, help="Cache directory or fsspec URL.")
@click.option("--grid", "grid_path", required=True, help="TOML grid: [base] options and [grid] axes (see sweep.py).")
@click.option("--out", "out_dir", required=True, help="Directory for the runs (one subdirectory each).")
@click.option("--jobs", type=int, default=1, show_default=True, help="Runs at once (processes).")
@click.option(
    "--speed/--no-speed",
    default=True,
    show_default=True,
    help="After training, measure each student's parameters and latency (one at a time).",
)
def sweep_cmd(cache, grid_path, out_dir, jobs, speed) -> None:
    """Run every point of a grid of distill-train options over one cache; finished runs are skipped,
    so the same command resumes a killed sweep. `distill-train report OUT` tabulates it."""
    from ..deploy.sweep import run_sweep

    try:
        results = run_sweep(cache, grid_path, out_dir, jobs, speed, log=click.echo)
    except ValueError as e:
        raise click.ClickException(str(e)) from None
    failed = [r for r in results if r["status"].startswith("failed")]
    if failed:
        raise click.ClickException(f"{len(failed)} of {len(results)} runs failed (see each run's sweep.log)")


@click.command("report", context_settings=CONTEXT)
@click.argument("out_dir")
@click.option(
    "--plots",
    is_flag=True,
    help="Also write OUT/f1_vs_<axis>.png for every numeric axis, and "
    "f1_vs_latency.png, f1_vs_params.png (matplotlib).",
)
@click.option("--teacher-f1", type=float, default=None, help="Draw the teacher's F1 as a dashed line.")
def report_cmd(out_dir, plots, teacher_f1) -> None:
    """A Markdown table of a sweep: dev F1 as mean ± std over seeds, one row per grid point."""
    from pathlib import Path

    from ..deploy.sweep import plot, report

    if not (Path(out_dir) / "sweep.json").exists():
        raise click.ClickException(f"{out_dir}: no sweep.json; run `distill-train sweep --out {out_dir}` first")
    click.echo(report(out_dir), nl=False)
    if plots:
        try:
            for path in plot(out_dir, teacher_f1):
                click.echo(f"plot: {path}")
        except ValueError as e:
            raise click.ClickException(str(e)) from None


def _choose(args: list[str]) -> tuple[str, list[str]]:
    """The recipe a command line asks for, and the rest of it: ``RECIPE ...``, the alias
    ``--recipe NAME ...``, the ``recipe`` key of ``--config FILE``, or mgkd."""
    named = [i for i, a in enumerate(args) if a == "--recipe" or a.startswith("--recipe=")]
    if named:
        i = named[0]
        name = args[i].split("=", 1)[1] if "=" in args[i] else (args[i + 1] if i + 1 < len(args) else "")
        rest = args[:i] + args[i + (1 if "=" in args[i] else 2) :]
        if rest and rest[0] in recipes():
            raise click.UsageError(f"the recipe is named twice ({rest[0]} and --recipe {name}): name it once")
        return name, rest
    if args and not args[0].startswith("-"):
        return args[0], args[1:]
    for i, a in enumerate(args):
        if a == "--config" and i + 1 < len(args) or a.startswith("--config="):
            path = a.split("=", 1)[1] if "=" in a else args[i + 1]
            try:
                return str(read_toml(path).get("recipe", "mgkd")), args
            except ValueError as e:
                raise click.ClickException(str(e)) from None
    return "mgkd", args


class _DistillTrain(click.Command):
    """The ``distill-train`` program: ``distill-train RECIPE [OPTIONS]`` trains one student
    (``distill-train --recipe RECIPE ...`` and, with neither, mgkd, as before);
    ``distill-train sweep|report ...`` run and tabulate a grid of them. A click command, so that
    click's test runner and callers invoke it like any other."""

    def main(self, args=None, prog_name=None, standalone_mode: bool = True, **extra):
        import sys

        args = sys.argv[1:] if args is None else list(args)
        commands = {"sweep": sweep_cmd, "report": report_cmd}
        if args and args[0] in commands:
            return commands[args[0]].main(
                args[1:], prog_name=f"distill-train {args[0]}", standalone_mode=standalone_mode, **extra
            )
        if not args or args[0] in ("-h", "--help", "--version"):
            text = f"seqdistill {__version__}" if args and args[0] == "--version" else _overview()
            return click.Command("distill-train", callback=lambda: click.echo(text)).main(
                [], prog_name="distill-train", standalone_mode=standalone_mode, **extra
            )
        try:
            name, rest = _choose(args)
            known = recipes()
            if name not in known:
                raise click.UsageError(f"unknown recipe {name!r}; the recipes: {', '.join(known)}")
        except click.ClickException as e:
            if not standalone_mode:
                raise
            e.show()
            sys.exit(e.exit_code)
        return _recipe_command(known[name]).main(
            rest, prog_name=f"distill-train {name}", standalone_mode=standalone_mode, **extra
        )


main = _DistillTrain("distill-train")


def entry(argv: list[str] | None = None) -> None:
    main.main(argv)


def _overview() -> str:
    lines = [
        "Usage: distill-train RECIPE --cache CACHE --out DIR [OPTIONS]",
        "       distill-train --config RUN.toml [OPTIONS]",
        "       distill-train sweep|report ...",
        "",
        "Train a small, fast student from a soft-label cache; no teacher is ever loaded.",
        "",
        "Recipes (distill-train RECIPE --help for each one's options):",
    ]
    for r in recipes().values():
        lines.append(f"  {r.name:13} {r.help}")
    lines += [
        "",
        "Examples:",
        "  distill-train mgkd --cache runs/cache --losses hard,seq-ce,fuzzy --k 5 --out runs/mgkd",
        "  distill-train xtremedistil --cache runs/cache --schedule d4 --teacher-layer 4 --out runs/xd",
        "  distill-train token-kd --cache runs/cache --temperature 2 --out runs/kd",
        "  distill-train --config runs/mgkd/config.toml",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    entry()
