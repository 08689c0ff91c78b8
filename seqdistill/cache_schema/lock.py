"""One writer at a time: the build lock of a cache.

``distill-cache build`` holds ``build.lock`` in the cache root while it writes. The file is JSON
naming its holder (a random token, host, pid, start time) and a heartbeat that a daemon thread
refreshes every ``stale_after / 4`` seconds. A second build finds the lock and either fails at once
with a message naming the holder or, with ``wait``, polls until the lock is free.

Stale locks: a build killed with SIGKILL leaves its lock behind. The lock is broken (with a log
line) when its holder is a process of this host that no longer exists, or, for a holder on another
host (object storage shared between machines), when its heartbeat is older than ``stale_after``.

Taking the lock: locally the lock is written to a temporary file and hard-linked into place, which
fails if the lock exists (atomic and never half-written). On object storage the file is opened in
exclusive mode (``"xb"``: S3's conditional ``If-None-Match`` PUT through s3fs, and fsspec's memory
filesystem), and the taker reads it back. A store that ignores the exclusive mode gives no mutual
exclusion (two takers can each read back their own token): use one that honours it.

Breaking a stale lock: locally the lock is first renamed to a name of the breaker's own (atomic),
and removed only if the renamed file still holds the stale token (otherwise it is put back), so two
breakers cannot remove a fresh lock; on object storage breaking is read-check-delete, best effort.
"Same host" means the same host name *and* the same pid namespace (containers sharing a host name
have their own pids), so a live build in another container is never taken for dead.

The heartbeat thread retries on storage errors; if it finds the lock taken by another build it
records it, and the build checks :meth:`BuildLock.check` before it commits the manifest.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass

from .errors import CacheLockedError
from .storage import CacheStore

LOCK = "build.lock"
STALE_AFTER = 600.0  # seconds without a heartbeat after which another host's lock is broken


@dataclass
class LockHolder:
    token: str
    host: str
    pid: int
    started: float
    heartbeat: float
    pidns: str = ""  # the pid namespace of the holder ("" where unknown)

    def describe(self, now: float) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return (
            f"pid {self.pid} on host {self.host}, started {started}, last heartbeat "
            f"{max(0.0, now - self.heartbeat):.0f} s ago"
        )

    def is_stale(self, now: float, stale_after: float) -> tuple[bool, str]:
        if self.host == socket.gethostname() and self.pidns == _pid_namespace() and not _pid_alive(self.pid):
            return True, f"its process {self.pid} on this host is gone"
        if now - self.heartbeat > stale_after:
            return True, f"no heartbeat for {now - self.heartbeat:.0f} s (more than {stale_after:.0f} s)"
        return False, ""


class BuildLock:
    """``with BuildLock(store): ...`` holds the cache's build lock for the block."""

    def __init__(
        self, store: CacheStore, *, wait: float = 0.0, stale_after: float = STALE_AFTER, poll: float = 0.5, log=print
    ):
        self.store, self.wait, self.stale_after, self.poll, self.log = store, wait, stale_after, poll, log
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: str | None = None  # set by the heartbeat when another build took the lock

    # -- the file -------------------------------------------------------------------------------
    def read(self) -> LockHolder | None:
        """The current holder, or None when the cache is not locked. An unreadable lock file (a
        writer died while writing it on a store without exclusive create) counts as stale."""
        try:
            data = json.loads(self.store.read_bytes(LOCK).decode("utf-8"))
            return LockHolder(
                data["token"], data["host"], data["pid"], data["started"], data["heartbeat"], data.get("pidns", "")
            )
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            return LockHolder("unreadable", "?", -1, 0.0, 0.0)

    def _holder(self, heartbeat: float | None = None) -> bytes:
        now = time.time()
        me = LockHolder(
            self.token, socket.gethostname(), os.getpid(), self._started, heartbeat or now, _pid_namespace()
        )
        return (json.dumps(asdict(me)) + "\n").encode("utf-8")

    def _create(self) -> bool:
        """Create the lock if absent; True if it is now ours."""
        data = self._holder()
        try:
            if self.store.is_local:
                path = self.store.path(LOCK)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = f"{path}.{self.token}"
                with open(tmp, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                try:
                    os.link(tmp, path)
                finally:
                    os.unlink(tmp)
            else:
                self.store.fs.makedirs(self.store.root, exist_ok=True)
                with self.store.fs.open(self.store.path(LOCK), "xb") as f:
                    f.write(data)
        except FileExistsError:
            return False
        held = self.read()
        return held is not None and held.token == self.token

    # -- acquire / release ----------------------------------------------------------------------
    def acquire(self) -> None:
        self._started = time.time()
        deadline = self._started + self.wait
        while True:
            if self._create():
                break
            now = time.time()
            holder = self.read()
            if holder is None:
                continue  # released between our attempt and the read: try again
            stale, why = holder.is_stale(now, self.stale_after)
            if stale:
                self.log(f"{self.store.url}: breaking a stale build lock ({holder.describe(now)}): {why}")
                self._break(holder)
                continue
            if now >= deadline:
                hint = (
                    "wait for it to finish, or pass --wait SECONDS to wait for it"
                    if self.wait == 0
                    else f"it is still held after {self.wait:.0f} s"
                )
                raise CacheLockedError(
                    f"{self.store.url}: another build is writing this cache ({holder.describe(now)}); {hint}. "
                    f"If that build is dead, its lock is broken automatically (at once on this host, after "
                    f"{self.stale_after:.0f} s without a heartbeat from another host), or remove "
                    f"{self.store.url}/{LOCK} by hand."
                )
            time.sleep(min(self.poll, max(0.0, deadline - now)))
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="seqdistill-lock-heartbeat", daemon=True)
        self._thread.start()

    def _break(self, holder: LockHolder) -> None:
        """Remove a stale lock, unless it changed hands since we read it."""
        if self.store.is_local:
            path = self.store.path(LOCK)
            aside = f"{path}.breaking-{self.token}"
            try:
                os.rename(path, aside)  # atomic: only one breaker gets the file
            except FileNotFoundError:
                return
            try:
                moved = json.loads(open(aside, "rb").read().decode("utf-8")).get("token")
            except (OSError, ValueError):
                moved = holder.token if holder.token == "unreadable" else None
            if moved != holder.token:  # a fresh lock was taken meanwhile: give it back
                try:
                    os.link(aside, path)
                except FileExistsError:
                    pass
            os.unlink(aside)
            return
        again = self.read()
        if again is not None and again.token == holder.token:
            self.store.remove(LOCK)

    def _beat(self) -> None:
        while not self._stop.wait(self.stale_after / 4):
            try:
                held = self.read()
                if held is None or held.token != self.token:
                    self.lost = (
                        f"{self.store.url}: the build lock was taken by another build while this one "
                        "held it (this one was thought dead); this build stops before committing"
                    )
                    self.log(f"WARNING: {self.lost}")
                    return
                self.store.write_json_atomic(LOCK, json.loads(self._holder(heartbeat=time.time())))
            except Exception as e:  # a transient storage error: try again at the next beat
                self.log(f"{self.store.url}: lock heartbeat failed ({type(e).__name__}: {e}); retrying")

    def check(self) -> None:
        """Raise if another build took the lock while this one held it."""
        if self.lost:
            raise CacheLockedError(self.lost)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        held = self.read()
        if held is not None and held.token == self.token:
            self.store.remove(LOCK)

    def __enter__(self) -> "BuildLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
