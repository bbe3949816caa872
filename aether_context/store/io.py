"""Low-level store IO: atomic, owner-private file writes and a bounded background writer.

- A write is atomic: a temp file in the same folder, then a rename, so a reader (or a process
  killed with SIGKILL mid-write) never leaves half a manifest under its real name.
- On a local file system, folders the store creates are 0700 and files 0600 (owner only).
  Object stores (s3, gcs, memory) have no POSIX modes: their access control is the bucket's.
- The background queue is bounded. A full queue makes the caller wait up to `put_timeout`, then
  the job runs in the caller's thread (`on_full="inline"`, the default) or is dropped and counted
  (`on_full="drop"`). Nothing is lost silently. On an event loop the wait is `await room()`: the
  calling task waits, never the loop; past `put_timeout` the oldest queued job runs on a worker thread.
  A job submitted on a loop's thread is queued, past the bound if another thread filled it meanwhile.
- A failed job is logged (the first with its traceback) and recorded in `stats()`/`failures`;
  it is never raised into the caller, not from `flush()` or `close()` either.
- Pending jobs are flushed at interpreter exit (atexit), bounded by `exit_timeout`.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import logging
import os
import queue
import threading
import time
import traceback
import uuid
import weakref
from typing import Any, Callable

from fsspec.implementations.local import LocalFileSystem

logger = logging.getLogger("aether_context.store")

__all__ = ["write_atomic", "makedirs_private", "BackgroundWriter", "WriteStats", "Lru"]

DIR_MODE = 0o700
FILE_MODE = 0o600


def makedirs_private(fs, path: str) -> None:
    """Create `path` and its missing parents; on a local file system each new folder is 0700."""
    if not isinstance(fs, LocalFileSystem):
        fs.makedirs(path, exist_ok=True)
        return
    missing = []
    current = path
    while current and not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(folder, DIR_MODE)  # the umask may have taken bits; never more than 0700 anyway


# Object stores put an object whole or not at all, and have no rename (a copy and a delete): written directly.
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss"})


def write_atomic(fs, path: str, data: bytes, folders: "Lru | None" = None) -> None:
    """Write `data` to `path` through a temp file in the same folder and a rename (on an object store, one put).
    `folders` holds folders known to exist (a local write then skips looking for its parents; a folder
    removed since is made again)."""
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    # fsspec's in-memory filesystem puts a file whole too, and its rename looks at every file it holds
    if OBJECT_STORES.intersection(protocols) or "memory" in protocols:
        fs.pipe_file(path, data)
        return
    parent = path.rsplit("/", 1)[0]
    if folders is None or folders.get(parent) is None:
        makedirs_private(fs, parent)
    tmp = f"{parent}/.tmp-{uuid.uuid4().hex}"
    if isinstance(fs, LocalFileSystem):
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileNotFoundError:  # the folder was removed since it was made
            makedirs_private(fs, parent)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        if folders is not None:
            folders.put(parent, True)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            _remove_quietly(tmp)
            raise
        return
    with fs.open(tmp, "wb") as f:
        f.write(data)
    fs.mv(tmp, path)


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


class WriteStats:
    """Counters of one store's writes, and the last failures (bounded)."""

    def __init__(self, keep_failures: int = 100):
        self.lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()
        self.failures: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep_failures)

    def add(self, key: str, n: int = 1) -> None:
        with self.lock:
            self.counts[key] += n

    def failed(self, what: str, error: BaseException) -> None:
        with self.lock:
            first = self.counts["failed"] == 0
            self.counts["failed"] += 1
            self.failures.append({"what": what, "error": f"{type(error).__name__}: {error}"[:500],
                                  "time": time.time()})
        if first:
            logger.error("aether-context: writing %s to the pack store failed; the agent run goes on "
                         "(later failures are logged in one line each)", what,
                         exc_info=(type(error), error, error.__traceback__))
        else:
            logger.error("aether-context: writing %s to the pack store failed: %s: %s", what,
                         type(error).__name__, error)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {**dict(self.counts), "recent_failures": list(self.failures)}


_LIVE: "weakref.WeakSet[BackgroundWriter]" = weakref.WeakSet()


def _flush_all_at_exit() -> None:
    for writer in list(_LIVE):
        writer.flush(timeout=writer.exit_timeout)


atexit.register(_flush_all_at_exit)


def _on_event_loop() -> bool:
    """Whether this thread is running an asyncio event loop (where no call may block)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class BackgroundWriter:
    """Runs write jobs on `workers` daemon threads (one: in order), through a queue its callers keep bounded (see
    the module doc). Jobs may finish out of order (several workers, or a caller running one when the queue is
    full), which content-addressed writes allow: a record node is written before anything names it."""

    def __init__(self, stats: WriteStats, *, max_queue: int = 256, put_timeout: float = 2.0,
                 on_full: str = "inline", exit_timeout: float = 30.0, background: bool = True, workers: int = 1):
        if on_full not in ("inline", "drop"):
            raise ValueError(f"on_full={on_full!r}: use 'inline' (write in the caller) or 'drop' (count and skip)")
        self.stats = stats
        self.background = background
        self.max_queue = max(1, max_queue)
        self.put_timeout = put_timeout
        self.on_full = on_full
        self.exit_timeout = exit_timeout
        # Unbounded underneath: the bound is kept by the callers' wait (`submit`, `room`), so a job from an
        # event loop's thread can always be queued without waiting.
        self._queue: queue.Queue | None = queue.Queue() if background else None
        self.workers = max(1, workers)
        self._threads: list[threading.Thread] = []
        self._start_lock = threading.Lock()
        if background:
            _LIVE.add(self)

    def full(self) -> bool:
        """Whether `max_queue` jobs wait."""
        return self._queue is not None and self._queue.qsize() >= self.max_queue

    def submit(self, what: str, job: Callable[[], None]) -> None:
        """Run `job` now (background=False) or on the writer thread; never raises. A full queue makes a thread wait
        up to `put_timeout`, then run the job itself or drop it (`on_full`). On an event loop's thread it never
        waits or writes: the caller awaited `room()`, and a job that still finds the queue full (another thread
        filled it meanwhile) is queued past the bound, or dropped (`on_full="drop"`)."""
        if self._queue is None:
            self._run_one(what, job)
            return
        self._ensure_worker()
        on_loop = _on_event_loop()
        if not on_loop:
            deadline, pause = time.monotonic() + self.put_timeout, 0.001
            while self.full() and time.monotonic() < deadline:
                time.sleep(pause)
                pause = min(0.05, 2 * pause)
        if not self.full() or (on_loop and self.on_full == "inline"):
            self._queue.put((what, job))
            return
        if self.on_full == "drop":
            self.stats.add("dropped")
            self.stats.failed(what, RuntimeError(f"write queue full (waited up to {self.put_timeout} s): dropped"))
            return
        self.stats.add("inline")
        self._run_one(what, job)

    async def room(self) -> None:
        """Return once the queue has room, without blocking the event loop: the calling task waits up to
        `put_timeout`; then (`on_full="inline"`) the oldest queued jobs run on a worker thread until there
        is room, so a store slower than the calls slows the calls, never the loop."""
        if self._queue is None:
            return
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + self.put_timeout, 0.001
        while self.full():
            if loop.time() < deadline:
                await asyncio.sleep(pause)
                pause = min(0.05, 2 * pause)
            elif self.on_full == "inline":
                await asyncio.to_thread(self._run_oldest)
            else:
                return  # `submit` drops the job and counts it

    def _run_oldest(self) -> None:
        assert self._queue is not None
        try:
            what, job = self._queue.get_nowait()
        except queue.Empty:
            return
        self.stats.add("inline")
        try:
            self._run_one(what, job)
        finally:
            self._queue.task_done()

    def _ensure_worker(self) -> None:
        with self._start_lock:
            self._threads = [t for t in self._threads if t.is_alive()]  # none after a fork
            while len(self._threads) < self.workers:
                thread = threading.Thread(target=self._loop, name="aether-context-store", daemon=True)
                thread.start()
                self._threads.append(thread)

    def _run_one(self, what: str, job: Callable[[], None]) -> None:
        try:
            job()
        except Exception as e:  # recorded and logged; the agent run goes on
            self.stats.failed(what, e)

    def _loop(self) -> None:
        assert self._queue is not None
        while True:
            what, job = self._queue.get()
            try:
                self._run_one(what, job)
            except BaseException:  # even a BaseException must not kill the writer and hang flush()
                logger.error("aether-context: store writer: %s", traceback.format_exc())
            finally:
                self._queue.task_done()

    def pending(self) -> int:
        return 0 if self._queue is None else self._queue.unfinished_tasks

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued job has run (or `timeout` seconds); True when all are done."""
        if self._queue is None:
            return True
        q = self._queue
        if q.unfinished_tasks:
            self._ensure_worker()  # e.g. after a fork, where the writer thread does not exist
        deadline = None if timeout is None else time.monotonic() + timeout
        with q.all_tasks_done:
            while q.unfinished_tasks:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    logger.error("aether-context: %d store writes still pending after %.0f s; they go on in the background and "
                                 "are flushed at exit", q.unfinished_tasks, timeout)
                    return False
                q.all_tasks_done.wait(left)
        return True


class Lru:
    """A bounded mapping (least recently used out first), safe across threads.

    Bounded by entries and, with `weigh`, by total weight (e.g. characters held)."""

    def __init__(self, size: int, *, max_weight: int = 0, weigh: Callable[[Any, Any], int] | None = None):
        self.size, self.lock, self.data = size, threading.Lock(), collections.OrderedDict()
        self.max_weight, self.weigh, self.weight = max_weight, weigh, 0

    def get(self, key):
        with self.lock:
            value = self.data.get(key)
            if value is not None:
                self.data.move_to_end(key)
            return value

    def put(self, key, value) -> None:
        with self.lock:
            old = self.data.pop(key, None)
            if old is not None and self.weigh:
                self.weight -= self.weigh(key, old)
            self.data[key] = value
            if self.weigh:
                self.weight += self.weigh(key, value)
            while self.data and (len(self.data) > self.size or (self.weigh and self.weight > self.max_weight)):
                k, v = self.data.popitem(last=False)
                if self.weigh:
                    self.weight -= self.weigh(k, v)

    def clear(self) -> None:
        with self.lock:
            self.data.clear()
            self.weight = 0
