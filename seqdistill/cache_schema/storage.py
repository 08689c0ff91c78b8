"""Where a cache lives: a local directory or any fsspec URL (s3://, gs://, memory://).

:class:`CacheStore` is the only place that touches the filesystem. Paths inside a cache are
relative POSIX paths; :func:`safe_relpath` rejects any that is absolute or climbs out of the root,
so a manifest from a stranger cannot make us read or write outside the cache.

Publishing: data is written to a temporary location and moved into place, then the small JSON
file that commits it is written with :meth:`CacheStore.write_json_atomic`. Locally the move is a
``rename`` within the cache root (atomic); on object stores, which have no rename, the commit file
itself is a single PUT, so a reader never sees it before the data it describes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import PurePosixPath

import fsspec

from .errors import ManifestError

TMP_DIR = ".tmp"
FAILPOINT_ENV = "SEQDISTILL_FAILPOINT"
FAILPOINT_TRACE_ENV = "SEQDISTILL_FAILPOINT_TRACE"


def failpoint(name: str) -> None:
    """Fault injection for tests: ``SEQDISTILL_FAILPOINT=NAME`` kills the process (SIGKILL) when
    it reaches the point called NAME, as a crash or ``kill -9`` would, and
    ``SEQDISTILL_FAILPOINT_TRACE=FILE`` appends the name of every point reached to FILE (to draw
    points to kill at). Points in a build, in order: ``json:<file>`` (a JSON file's temporary copy
    written, not yet renamed into place: layer headers, shard markers, the manifest),
    ``shard-parquet:<layer>:<i>`` and ``shard-staged:<layer>:<i>`` (a shard's Parquet file, then
    all its files, written to the staging directory), ``publish:<dir>`` (the old copy of a
    directory removed, the new one not yet moved in), ``shard-data:<layer>:<i>`` (data published,
    marker not yet written), ``shard-marker:<layer>:<i>``, ``exports-staged:<layer>``,
    ``exports-data:<layer>`` and ``manifest`` (everything written but the manifest). In training:
    ``train-step:<n>`` (after optimiser step n of the one trainer, a student's or a teacher fine-tune's) and ``checkpoint-swap:<n>`` (the old checkpoint
    moved aside, the one of step n not yet in place)."""
    trace = os.environ.get(FAILPOINT_TRACE_ENV)
    if trace:
        with open(trace, "a") as f:
            f.write(name + "\n")
    if os.environ.get(FAILPOINT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def parse_storage_options(values) -> dict:
    """``["KEY=VALUE", ...]`` (the CLIs' ``--storage-option``) as fsspec keyword arguments."""
    out = {}
    for v in values:
        key, sep, val = v.partition("=")
        if not sep or not key:
            raise ValueError(f"--storage-option {v!r} is not KEY=VALUE")
        out[key] = val
    return out


def safe_relpath(path: str, what: str = "path") -> str:
    """Validate a cache-relative path from a manifest; return it normalised or raise."""
    if not isinstance(path, str) or not path:
        raise ManifestError(f"{what}: empty or non-string path {path!r}")
    if "\\" in path or "\x00" in path or path.startswith("/") or ":" in path.split("/")[0]:
        raise ManifestError(f"{what}: {path!r} is not a relative path inside the cache; refusing it")
    parts = PurePosixPath(path).parts
    if any(p in ("..", "") for p in parts):
        raise ManifestError(f"{what}: {path!r} escapes the cache root; refusing it")
    return "/".join(p for p in parts if p != ".")


def sha256_file(f, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    while True:
        block = f.read(chunk)
        if not block:
            return h.hexdigest()
        h.update(block)


class CacheStore:
    """A cache root on some filesystem."""

    def __init__(self, url: str | os.PathLike, storage_options: dict | None = None):
        self.url = str(url)
        self.storage_options = dict(storage_options or {})
        self.fs, root = fsspec.core.url_to_fs(self.url, **self.storage_options)
        self.root = root.rstrip("/") or "/"
        self.is_local = "file" in _protocols(self.fs)

    def path(self, rel: str) -> str:
        rel = safe_relpath(rel) if rel else ""
        return f"{self.root}/{rel}" if rel else self.root

    def url_of(self, rel: str) -> str:
        """A URL for ``rel`` usable by other fsspec-aware libraries (zarr's FsspecStore)."""
        if self.is_local:
            return self.path(rel)
        return self.fs.unstrip_protocol(self.path(rel))

    # -- reading --------------------------------------------------------------------------------
    def exists(self, rel: str) -> bool:
        return self.fs.exists(self.path(rel))

    def read_bytes(self, rel: str) -> bytes:
        return self.fs.cat_file(self.path(rel))

    def read_json(self, rel: str):
        return json.loads(self.read_bytes(rel).decode("utf-8"))

    def open(self, rel: str, mode: str = "rb"):
        return self.fs.open(self.path(rel), mode)

    def size(self, rel: str) -> int:
        return int(self.fs.size(self.path(rel)))

    def sha256(self, rel: str) -> str:
        with self.open(rel) as f:
            return sha256_file(f)

    def listdir(self, rel: str) -> list[str]:
        """Names (not paths) directly under ``rel``; empty if it does not exist."""
        p = self.path(rel)
        if not self.fs.exists(p):
            return []
        return sorted(PurePosixPath(e).name for e in self.fs.ls(p, detail=False))

    def find(self, rel: str) -> list[str]:
        """Every file below ``rel``, as cache-relative paths, sorted."""
        p = self.path(rel)
        if not self.fs.exists(p):
            return []
        prefix = self.root.rstrip("/") + "/"
        return sorted(f[len(prefix) :] for f in self.fs.find(p) if f.startswith(prefix))

    # -- writing --------------------------------------------------------------------------------
    def makedirs(self, rel: str) -> None:
        self.fs.makedirs(self.path(rel), exist_ok=True)

    def remove(self, rel: str) -> None:
        p = self.path(rel)
        if self.fs.exists(p):
            self.fs.rm(p, recursive=True)

    def write_json_atomic(self, rel: str, obj) -> None:
        """Write JSON so that readers see either the old file or the whole new one."""
        data = (json.dumps(obj, indent=1, sort_keys=False) + "\n").encode("utf-8")
        final = self.path(rel)
        parent = str(PurePosixPath(final).parent)
        self.fs.makedirs(parent, exist_ok=True)
        if self.is_local:
            tmp = f"{final}.tmp-{uuid.uuid4().hex}"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            failpoint(f"json:{rel}")
            os.replace(tmp, final)
        else:  # a single PUT is atomic on object stores
            self.fs.pipe_file(final, data)

    @contextmanager
    def staging_dir(self):
        """A local scratch directory to build files in before :meth:`publish_dir`.

        For a local cache it lies inside the root (``.tmp/``) so that publishing is a rename.
        """
        if self.is_local:
            base = self.path(TMP_DIR)
            os.makedirs(base, exist_ok=True)
            d = tempfile.mkdtemp(dir=base)
        else:
            d = tempfile.mkdtemp(prefix="seqdistill-")
        try:
            yield d
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def publish_dir(self, local_dir: str, rel: str) -> None:
        """Move a staged directory to ``rel``, replacing whatever half-written copy was there."""
        self.remove(rel)
        final = self.path(rel)
        self.fs.makedirs(str(PurePosixPath(final).parent), exist_ok=True)
        failpoint(f"publish:{rel}")
        if self.is_local:
            os.replace(local_dir, final)
        else:
            self.fs.put(local_dir.rstrip("/") + "/", final, recursive=True)


def _protocols(fs) -> tuple[str, ...]:
    p = fs.protocol
    return (p,) if isinstance(p, str) else tuple(p)
