"""``hf:DIR[@SPLIT]``: a ``datasets`` ``save_to_disk`` directory, read as Parquet rows are.
``datasets`` is imported only here (``pip install 'seqdistill[datasets]'``)."""

from __future__ import annotations

import json
import os

from .parquet import BATCH_ROWS
from .rows import TagNames, class_label_names, table_sentences
from .sentences import HF_PREFIX, CorpusError


def hf_location(spec: str) -> tuple[str, str | None]:
    """``hf:DIR[@SPLIT]`` -> (DIR, SPLIT or None). A DIR that exists with its ``@`` is a directory."""
    rest = spec[len(HF_PREFIX) :] if spec.startswith(HF_PREFIX) else spec
    head, at, tail = rest.rpartition("@")
    if at and head and tail and "/" not in tail and not os.path.isdir(rest):
        return head, tail
    return rest, None


def read_hf(spec: str, labelled: bool, names: TagNames, notes: list[str], digest):
    """A ``save_to_disk`` directory: (the path errors and the manifest name, its sentences as they
    are read, ``BATCH_ROWS`` rows at a time). ``digest`` gets the sha256 input at once: the split's
    Arrow files as stored, then its features."""
    directory, split = hf_location(spec)
    shown = f"{HF_PREFIX}{directory}"
    try:
        import datasets
    except ImportError:
        raise CorpusError(
            shown, None, "reading a Hugging Face dataset needs the datasets package: pip install 'seqdistill[datasets]'"
        ) from None
    try:
        ds = datasets.load_from_disk(directory)
    except FileNotFoundError:
        what = (
            "no such directory"
            if not os.path.exists(directory)
            else "not a datasets save_to_disk directory (it has no dataset_dict.json, nor state.json with dataset_info.json)"
        )
        raise CorpusError(shown, None, what) from None
    if isinstance(ds, datasets.DatasetDict):
        splits = list(ds)
        if split is None and len(splits) == 1:
            split = splits[0]
        if split is None:
            raise CorpusError(
                shown,
                None,
                f"a DatasetDict with splits {', '.join(splits)}: pick one with {shown}@SPLIT (e.g. {shown}@{splits[0]})",
            )
        if split not in ds:
            raise CorpusError(shown, None, f"no split {split!r}: the DatasetDict has {', '.join(splits)}")
        ds, shown = ds[split], f"{shown}@{split}"
    elif split is not None:
        shown = f"{shown}@{split}"  # a plain Dataset: @SPLIT names the corpus split, it selects nothing
    features = ds.features.to_dict()
    names.set_class_label(class_label_names(features), shown)
    for f in ds.cache_files:  # the split's Arrow files, as stored
        with open(f["filename"], "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    digest.update(json.dumps(features, sort_keys=True).encode())
    batches = ds.with_format("arrow").iter(batch_size=BATCH_ROWS)
    return shown, table_sentences(batches, list(ds.column_names), shown, labelled, names, notes)
