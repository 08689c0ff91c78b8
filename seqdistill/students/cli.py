"""``distill-train``: stage two's command line."""

from __future__ import annotations

import click

from .. import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="seqdistill")
def main() -> None:
    """Stage two of seqdistill: train small, fast students from a soft-label cache.

    Students stream the cache's shards and never load a teacher. The training recipes (MGKD,
    XtremeDistil, MT-BERT, BiLSTM/SRU, SenTScore KD) are added command by command; in this
    version the group is empty — build and inspect caches with `distill-cache`.
    """


if __name__ == "__main__":
    main()
