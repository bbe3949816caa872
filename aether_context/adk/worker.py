"""The pack thread, and the edge work that must neither stall nor hang the event loop.

ADK runs every callback on its event loop. The pure build of a pack, embedding, and the CPU work
on tool results run on the process's one pack thread (`off_loop`): packers share retrievers and
embedding caches (one per retrieval settings), so builds run there one at a time, on a thread that
lives as long as the process. An LLM summary runs under a timeout (`summarize`), a sync
summarizer on a thread of its own so the timeout can leave it behind. What the next compaction
will read is computed ahead, after a request has gone out, on a work-ahead thread of its own
(`start_ahead`: at most one job at a time, dropped when busy); what an imminent call will read (the
question of a new user turn) is queued there behind it (`queue_ahead`). Invalid Unicode from a tool
is repaired before anything hashes or stores it (`repair_unicode`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import threading
import time
import logging
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor, TimeoutError
from typing import Any, Callable, Sequence

from ..compress import SummarizeFn, Summarizer

__all__ = ["off_loop", "pack_worker", "start_ahead", "queue_ahead", "wait_ahead", "summarize", "repair_unicode"]

logger = logging.getLogger("aether_context")

_THREADS: dict[str, ThreadPoolExecutor] = {}
_THREADS_LOCK = threading.Lock()


def _thread(name: str) -> ThreadPoolExecutor:
    """The process's one thread named `name` (`aether-<name>`), started on first use, living as long as the process."""
    with _THREADS_LOCK:
        if name not in _THREADS:
            _THREADS[name] = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"aether-{name}")
        return _THREADS[name]


def pack_worker() -> ThreadPoolExecutor:
    """The process's one pack thread: packers share retrievers and embedding caches (one per retrieval
    settings), so all builds run there, one at a time."""
    return _thread("pack")


async def off_loop(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` on the pack thread, awaited from the event loop."""
    return await asyncio.get_running_loop().run_in_executor(pack_worker(), functools.partial(fn, *args, **kwargs))


_AHEAD: list[Future] = []  # the work-ahead job in flight, if any
_QUEUED: list[Future] = []  # the queued jobs not yet done
QUEUED_MAX = 8  # queued jobs kept waiting: an older one's call has run by then (it embedded its own question)
_AHEAD_LOCK = threading.Lock()


def start_ahead(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> bool:
    """Run `fn` on the process's work-ahead thread, after a request has gone out, unless a job is
    already running there (then dropped: work ahead only fills caches, a compaction computes what
    it misses). A failure is logged, never raised. Returns whether the job was started."""
    with _AHEAD_LOCK:
        if _AHEAD and not _AHEAD[0].done():
            return False
        _AHEAD[:] = [_thread("ahead").submit(_quietly, fn, *args, **kwargs)]
    return True


def queue_ahead(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> None:
    """Run `fn` on the work-ahead thread once the job in flight there is done: for a cache fill an imminent
    call reads whose hit equals its miss (a new user turn's question vector). A call that needs the value
    before the job starts computes it itself, and the job then finds it. Only the newest `QUEUED_MAX` wait
    (many sessions' messages behind a long job: the oldest not started is cancelled). A failure is logged,
    never raised."""
    with _AHEAD_LOCK:
        _QUEUED[:] = [job for job in _QUEUED if not job.done()]
        while len(_QUEUED) >= QUEUED_MAX:
            _QUEUED.pop(0).cancel()  # False when it already runs: it then finishes
        _QUEUED.append(_thread("ahead").submit(_quietly, fn, *args, **kwargs))


def wait_ahead(timeout: float | None = None) -> bool:
    """Wait for the work-ahead jobs in flight and queued (benchmarks and tests: a model call's latency lets
    them finish)."""
    with _AHEAD_LOCK:
        jobs = _AHEAD + _QUEUED
    deadline = None if timeout is None else time.monotonic() + timeout  # one timeout for them all
    for job in jobs:
        try:
            job.result(None if deadline is None else max(0.0, deadline - time.monotonic()))
        except CancelledError:  # a queued job a newer one replaced
            continue
        except TimeoutError:
            return False
    return True


def ahead_thread_id() -> int:
    """The work-ahead thread's id (benchmarks read its CPU clock); starts the thread if needed."""
    return _thread("ahead").submit(threading.get_ident).result()


def _quietly(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception:  # an optimisation that failed: the next compaction computes what it needs
        logger.warning("aether-context: work ahead failed", exc_info=True)
        return None


async def summarize(summarizer: "Summarizer | SummarizeFn", previous: str | None, items: "Sequence[str]", *,
                     goal: str, max_tokens: int) -> str:
    """Call a sync or async summarizer; a sync one runs on a thread, so a timeout can leave it behind."""
    call = summarizer.summarize if isinstance(summarizer, Summarizer) else summarizer
    if inspect.iscoroutinefunction(call):
        return await call(previous, list(items), goal=goal, max_tokens=max_tokens)
    result = await asyncio.to_thread(call, previous, list(items), goal=goal, max_tokens=max_tokens)
    return await result if inspect.isawaitable(result) else result


def repair_unicode(value: object) -> tuple[object, int]:
    """`value` with lone surrogates (invalid Unicode, unencodable as UTF-8) replaced by U+FFFD and
    surrogate pairs joined, and how many characters were replaced; unchanged (same object) if none."""
    if isinstance(value, str):
        if not _SURROGATE.search(value):
            return value, 0
        fixed = value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return fixed, fixed.count("\ufffd") - value.count("\ufffd")
    if isinstance(value, (list, tuple)):
        items = [repair_unicode(v) for v in value]
        n = sum(c for _, c in items)
        return ([v for v, _ in items] if n else value), n
    if isinstance(value, dict):
        pairs = [(repair_unicode(k), repair_unicode(v)) for k, v in value.items()]
        n = sum(kc + vc for (_, kc), (_, vc) in pairs)
        return ({k: v for (k, _), (v, _) in pairs} if n else value), n
    return value, 0


_SURROGATE = re.compile("[\ud800-\udfff]")
