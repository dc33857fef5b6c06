"""Timing scopes: a request and the stages inside it, as context managers or decorators.

The current scope lives in a :class:`contextvars.ContextVar`, so nesting follows
the code that actually runs: each asyncio task inherits its creator's scope (a
stage started in ``asyncio.gather`` nests under the request that gathered), and
``asyncio.to_thread``, ``contextvars.copy_context().run`` and Starlette's
threadpool carry it into threads. A plain ``ThreadPoolExecutor.submit`` does
not copy the context; a stage run there is recorded as top-level.

A stage nested in another stage of the same tracker is named by its path
(``"generate/prefill"``); the budget report treats only top-level stages as
parts of the request's time, since a nested stage is inside its parent's.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, Protocol, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])
REQUEST = "request"
STAGE = "stage"
UNATTRIBUTED = "(unattributed)"


class SpanHook(Protocol):
    """Something told about every scope (the OpenTelemetry exporter is one)."""

    def open(self, tracker: str, kind: str, path: str) -> object:
        """Called on entry, before the clock starts; returns a handle for :meth:`close`."""

    def close(
        self,
        handle: object,
        duration_ns: int,
        ok: bool,
        error: BaseException | None,
        attributes: dict[str, Any],
    ) -> None:
        """Called on exit, after the clock stopped and the duration was recorded."""


class Recorder(Protocol):
    """What a scope needs from its tracker (:class:`~tailwise.instrument.tracker.LatencyTracker`).

    Owned here, by the consumer, so that this module never imports the tracker.
    """

    @property
    def name(self) -> str: ...

    @property
    def hooks(self) -> Sequence[SpanHook]: ...

    @property
    def clock(self) -> Callable[[], int]: ...

    def record(self, latency_ns: int, ok: bool = True) -> None: ...

    def record_stage(self, path: str, latency_ns: int, ok: bool = True) -> None: ...


class Frame:
    """The open scope; ``child_ns`` sums the top-level stages that finished inside it."""

    __slots__ = ("child_ns", "kind", "path", "tracker")

    def __init__(self, tracker: Recorder, kind: str, path: str) -> None:
        self.tracker, self.kind, self.path = tracker, kind, path  # path "" for a request
        self.child_ns = -1  # -1: no stage ran inside


CURRENT: ContextVar[Frame | None] = ContextVar("tailwise_instrument_scope", default=None)


def path_of(tracker: Recorder, kind: str, name: str, parent: Frame | None) -> str:
    """A request is ""; a stage is its name, under its parent stage of the same tracker."""
    if kind == REQUEST:
        return ""
    if parent is None or parent.tracker is not tracker or parent.kind == REQUEST:
        return name
    return f"{parent.path}/{name}"


class Scope:
    """Times one request or stage. Use a fresh one each time (``with tracker.stage(...)``).

    As a decorator it opens a fresh scope per call, and for ``async def``
    functions it times the awaited body, not the creation of the coroutine.
    Inside the block, set ``attributes`` to pass details to span hooks,
    ``ok = False`` to count the scope as failed without raising, or
    ``start_ns``/``end_ns`` (the tracker's clock) when the caller knows the
    true instants better (the ASGI middleware does).
    """

    __slots__ = (
        "_frame",
        "_opened",
        "_parent",
        "_token",
        "attributes",
        "end_ns",
        "kind",
        "name",
        "ok",
        "path",
        "start_ns",
        "tracker",
    )

    def __init__(self, tracker: Recorder, kind: str, name: str) -> None:
        self.tracker, self.kind, self.name = tracker, kind, name
        self.path = ""
        self.ok = True
        self.attributes: dict[str, Any] = {}
        self._opened: list[tuple[SpanHook, object]] = []
        self._token: Token[Frame | None] | None = None
        self._frame: Frame | None = None
        self._parent: Frame | None = None
        self.start_ns = 0
        self.end_ns: int | None = None  # set inside the block to end the clock earlier

    def __enter__(self) -> Scope:
        t = self.tracker
        self._parent = CURRENT.get()
        self.path = path_of(t, self.kind, self.name, self._parent)
        self._frame = Frame(t, self.kind, self.path)
        self._token = CURRENT.set(self._frame)
        if t.hooks:
            label = self.name if self.kind == STAGE else self.name or t.name
            self._opened = [(h, h.open(t.name, self.kind, self.path or label)) for h in t.hooks]
        self.start_ns = t.clock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        t = self.tracker
        duration_ns = (t.clock() if self.end_ns is None else self.end_ns) - self.start_ns
        ok = self.ok and exc_type is None
        if self.kind == REQUEST:
            t.record(duration_ns, ok)
            self._record_unattributed(duration_ns)
        else:
            t.record_stage(self.path, duration_ns, ok)
            self._add_to_request(duration_ns)
        for hook, handle in reversed(self._opened):
            hook.close(handle, duration_ns, ok, exc, self.attributes)
        if self._token is not None:
            CURRENT.reset(self._token)
            self._token = None

    def _add_to_request(self, duration_ns: int) -> None:
        """A top-level stage's time counts against its request's unattributed time."""
        p = self._parent
        if p is not None and p.tracker is self.tracker and p.kind == REQUEST:
            p.child_ns = duration_ns if p.child_ns < 0 else p.child_ns + duration_ns

    def _record_unattributed(self, duration_ns: int) -> None:
        """Request time outside every top-level stage (0 when stages overlapped it all)."""
        f = self._frame
        if f is not None and f.child_ns >= 0:
            self.tracker.record_stage(UNATTRIBUTED, max(duration_ns - f.child_ns, 0))

    async def __aenter__(self) -> Scope:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def __call__(self, fn: F) -> F:
        tracker, kind, name = self.tracker, self.kind, self.name

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                with Scope(tracker, kind, name):
                    return await fn(*args, **kwargs)

            return cast(F, timed_async)

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with Scope(tracker, kind, name):
                return fn(*args, **kwargs)

        return cast(F, timed)
