"""Instrumentation of a replay: which model calls are the agent's, and how long ADK and the plugins took.

`_ProbeFirst` / `_ProbeLast` bracket the plugins under test in `before_model` (their time, the session
size, ADK compaction events so far), `_time_adk_request_building` times ADK's own request processors,
`GatedPlugin` lets a plugin join a long session late. Used by `replay_adk.replay`.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from google.adk.flows.llm_flows.base_llm_flow import BaseLlmFlow
from google.adk.plugins.base_plugin import BasePlugin

__all__ = ["ModelCall", "GatedPlugin", "ProbeFirst", "ProbeLast", "time_adk_request_building"]

_BUILD_TIMES: dict[int, tuple[float, float]] = {}  # id(llm_request) -> (wall, thread CPU) seconds in ADK's request processors
_PATCH_DEPTH = 0


@contextlib.contextmanager
def time_adk_request_building() -> Iterator[None]:
    """Time `BaseLlmFlow._preprocess_async` (ADK's request processors) per request, while active.

    Only the time the generator itself runs is counted, not time spent by its consumer while it
    is suspended on a yielded event; both wall time and this thread's CPU time. The patch is
    process-wide and undone on exit.
    """
    global _PATCH_DEPTH
    original = BaseLlmFlow.__dict__["_preprocess_async"] if _PATCH_DEPTH == 0 else None
    if _PATCH_DEPTH == 0:
        async def timed(self, invocation_context, llm_request, **kwargs):  # type: ignore[no-untyped-def]
            agen = original(self, invocation_context, llm_request, **kwargs)
            wall = cpu = 0.0
            try:
                while True:
                    t0, c0 = time.perf_counter(), time.thread_time()
                    try:
                        event = await agen.__anext__()
                    except StopAsyncIteration:
                        wall, cpu = wall + time.perf_counter() - t0, cpu + time.thread_time() - c0
                        break
                    wall, cpu = wall + time.perf_counter() - t0, cpu + time.thread_time() - c0
                    yield event
            finally:
                await agen.aclose()
                _BUILD_TIMES[id(llm_request)] = (wall, cpu)

        BaseLlmFlow._preprocess_async = timed  # type: ignore[method-assign]
    _PATCH_DEPTH += 1
    try:
        yield
    finally:
        _PATCH_DEPTH -= 1
        if _PATCH_DEPTH == 0 and original is not None:
            BaseLlmFlow._preprocess_async = original  # type: ignore[method-assign]
            _BUILD_TIMES.clear()


@dataclass
class ModelCall:
    """One model call of a replay.

    `events`: session events when the request was handed to the plugins. `adk_build_s`: ADK's
    request building for it (`adk_build_cpu_s` the same in thread CPU time). `plugins_s`: all
    plugins' `before_model` work. `request`: what the model received, per `keep_requests`.
    """

    index: int
    invocation: int
    events: int = 0
    adk_build_s: float | None = None
    adk_build_cpu_s: float | None = None
    plugins_s: float | None = None
    compactions: int = 0  # ADK compaction events in the session when the request was handed to the plugins
    request: Any = None
    _t0: float = 0.0


class ProbeFirst(BasePlugin):
    def __init__(self, result: "ReplayResult"):
        super().__init__("bench_probe_first")
        self.result = result

    async def before_model_callback(self, *, callback_context, llm_request):  # type: ignore[no-untyped-def]
        wall, cpu = _BUILD_TIMES.pop(id(llm_request), (None, None))
        call = ModelCall(index=len(self.result.calls), invocation=self.result._invocation,
                         events=len(callback_context.session.events), adk_build_s=wall, adk_build_cpu_s=cpu,
                         compactions=sum(1 for e in callback_context.session.events if e.actions and e.actions.compaction))
        self.result.calls.append(call)
        self.result._agent_requests.add(id(llm_request))
        call._t0 = time.perf_counter()
        return None


class ProbeLast(BasePlugin):
    def __init__(self, result: "ReplayResult"):
        super().__init__("bench_probe_last")
        self.result = result

    async def before_model_callback(self, *, callback_context, llm_request):  # type: ignore[no-untyped-def]
        call = self.result.calls[-1]
        call.plugins_s = time.perf_counter() - call._t0
        return None


_HOOKS = (
    "on_user_message_callback", "before_run_callback", "on_event_callback", "after_run_callback",
    "before_agent_callback", "after_agent_callback", "before_model_callback", "after_model_callback",
    "on_model_error_callback", "before_tool_callback", "after_tool_callback", "on_tool_error_callback",
    "on_agent_error_callback", "on_run_error_callback",
)


class GatedPlugin(BasePlugin):
    """Forwards every hook to `inner` only once the session holds `from_events` events.

    For long sessions where only the late calls are measured: earlier calls run as with no plugin,
    and the plugin joins cold at `from_events`. `close` is always forwarded.
    """

    def __init__(self, inner: BasePlugin, *, from_events: int):
        super().__init__(f"{inner.name}_from_{from_events}")
        self.inner = inner
        self.from_events = from_events
        for hook in _HOOKS:
            if hasattr(inner, hook):
                setattr(self, hook, self._gated(hook))

    def _gated(self, hook: str) -> Callable[..., Any]:
        target = getattr(self.inner, hook)

        async def forward(**kwargs: Any) -> Any:
            ctx = kwargs.get("callback_context") or kwargs.get("tool_context") or kwargs.get("invocation_context")
            session = getattr(ctx, "session", None)
            if session is not None and len(session.events) < self.from_events:
                return None
            return await target(**kwargs)

        return forward

    async def close(self) -> None:
        await self.inner.close()
