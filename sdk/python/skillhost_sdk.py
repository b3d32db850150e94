"""skillhost-sdk for Python: write a skillhost skill as one function.

A skill is a function ``execute(ctx, params)`` plus one line, ``WitWorld = world(execute)``,
in ``app.py``; ``skillhost skill build`` turns it into ``skill.wasm`` with componentize-py.
The SDK hides the WIT bindings: ``params`` is the JSON object the host has already
validated against SKILL.md (defaults filled in), and you return a :class:`Result` built
with its small builder, or raise :class:`InvalidParams` / :class:`Failed`::

    from skillhost_sdk import Context, Result, InvalidParams, world

    def execute(ctx: Context, params: dict) -> Result:
        name = params["name"].strip()
        if not name:
            raise InvalidParams("name: must not be blank")
        ctx.info(f"greeting {name}")
        return Result.success(f"hello, {name}").meta("length", len(name))

    WitWorld = world(execute)

Host calls (memory search, session, log) raise :class:`HostError` when the skill lacks the
capability or the host refuses; its text is a sentence fit for the model, and an uncaught
one becomes the call's ``failed`` error. Any other uncaught exception also becomes
``failed``, with its type, message and the last line of the traceback, so the model (and
you) can read what went wrong instead of "the component trapped".

Only the standard library is available inside the component unless you vendor pure-Python
packages next to ``app.py``. Reading files, the network or environment variables works only
as far as SKILL.md declares it and the user granted it.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any, Callable, Iterable, List, Optional, Tuple

import wit_world
from componentize_py_types import Err
from wit_world.imports import log as _log
from wit_world.imports import memory as _memory
from wit_world.imports import session as _session
from wit_world.imports import types as _types

__all__ = [
    "Context",
    "Failed",
    "HostError",
    "InvalidParams",
    "MemoryHit",
    "Result",
    "world",
]

MemoryHit = _types.MemoryHit

_KINDS = {
    "preference": _types.MemoryKind.PREFERENCE,
    "fact": _types.MemoryKind.FACT,
    "task-result": _types.MemoryKind.TASK_RESULT,
    "snapshot": _types.MemoryKind.SNAPSHOT,
    "pitfall": _types.MemoryKind.PITFALL,
    "general": _types.MemoryKind.GENERAL,
}


class InvalidParams(Exception):
    """The parameters were wrong; the message tells the caller how to fix the call."""


class Failed(Exception):
    """The skill failed for another reason; the message says what happened."""


class HostError(Exception):
    """A host call did not succeed: ``kind`` is ``denied``, ``invalid-input`` or ``unavailable``."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{_HOST_ERROR_PREFIX[kind]}{message}")
        self.kind = kind
        self.message = message


_HOST_ERROR_PREFIX = {"denied": "denied: ", "invalid-input": "invalid input: ", "unavailable": "host unavailable: "}


def _host_error(err: Err) -> HostError:
    value = err.value
    if isinstance(value, _types.HostError_Denied):
        return HostError("denied", value.value)
    if isinstance(value, _types.HostError_InvalidInput):
        return HostError("invalid-input", value.value)
    return HostError("unavailable", getattr(value, "value", str(value)))


def _host_call(call: Callable[..., Any], *args: Any) -> Any:
    try:
        return call(*args)
    except Err as err:
        raise _host_error(err) from None


class Result:
    """What a call returns: output text, status, metadata and proposed memories."""

    def __init__(self, output: str, status: _types.Status):
        self.output = output
        self.status = status
        self.metadata: List[Tuple[str, str]] = []
        self.memories: List[_types.NewMemory] = []

    @classmethod
    def success(cls, output: str) -> "Result":
        """The skill did what was asked; ``output`` holds the answer."""
        return cls(str(output), _types.Status.SUCCESS)

    @classmethod
    def failure(cls, output: str) -> "Result":
        """The skill ran but could not do what was asked; ``output`` says why."""
        return cls(str(output), _types.Status.FAILURE)

    @classmethod
    def require_more(cls, question: str) -> "Result":
        """The skill needs more input from the user; ``question`` is what to ask."""
        return cls(str(question), _types.Status.REQUIRE_MORE)

    def meta(self, key: str, value: Any) -> "Result":
        """Add a machine-readable key/value fact (values are stored as text)."""
        self.metadata.append((str(key), value if isinstance(value, str) else json.dumps(value)))
        return self

    def remember(self, kind: str, content: str, priority: int = 2, tags: Iterable[str] = ()) -> "Result":
        """Propose a memory (kept only with ``memory: write``, within the skill's limits).

        ``kind`` is one of preference, fact, task-result, snapshot, pitfall, general;
        ``priority`` 0 (trivia) to 5 (never dropped silently). Summarize: counts and key
        lines, never raw input.
        """
        if kind not in _KINDS:
            raise ValueError(f"memory kind {kind!r} is not one of {', '.join(_KINDS)}")
        if not 0 <= int(priority) <= 5:
            raise ValueError(f"memory priority {priority} is not in 0..5")
        self.memories.append(_types.NewMemory(_KINDS[kind], str(content), int(priority), [str(t) for t in tags]))
        return self

    def _to_wit(self) -> _types.SkillResult:
        return _types.SkillResult(
            output=self.output, new_memories=self.memories, status=self.status, metadata=self.metadata
        )


class Context:
    """The call's session and step, and the host interfaces."""

    def __init__(self, session_id: str, step: int):
        self.session_id = session_id
        self.step = step

    def memory_search(self, query: str, limit: int = 5) -> List[MemoryHit]:
        """Long-term memory records relevant to ``query``, best first (needs ``memory: read``)."""
        return _host_call(_memory.search, query, limit)

    def session_get(self, key: str) -> Optional[str]:
        """A value from session working memory (needs ``session``)."""
        return _host_call(_session.get, key)

    def session_set(self, key: str, value: str) -> None:
        """Store a value in session working memory (needs ``session``)."""
        _host_call(_session.set, key, value)

    def session_keys(self) -> List[str]:
        """All keys of session working memory, sorted (needs ``session``)."""
        return _host_call(_session.keys)

    def log(self, level: str, message: str) -> None:
        """A log line in the call report and the audit log (trace, debug, info, warn, error)."""
        _log.write(_log.Level[level.upper()], str(message))

    def debug(self, message: str) -> None:
        self.log("debug", message)

    def info(self, message: str) -> None:
        self.log("info", message)

    def warn(self, message: str) -> None:
        self.log("warn", message)

    def error(self, message: str) -> None:
        self.log("error", message)


def _describe(exc: BaseException) -> str:
    where = traceback.extract_tb(exc.__traceback__)
    at = f" (at {where[-1].filename}:{where[-1].lineno} in {where[-1].name})" if where else ""
    return f"uncaught {type(exc).__name__}: {exc}{at}"


def world(execute: Callable[[Context, dict], Any]) -> type:
    """The class componentize-py exports: ``WitWorld = world(execute)`` in ``app.py``.

    ``execute`` returns a :class:`Result` (a plain string counts as ``Result.success``).
    """

    class WitWorld(wit_world.WitWorld):
        def execute(self, call: _types.Invocation) -> _types.SkillResult:
            try:
                params = json.loads(call.params) if call.params else {}
                result = execute(Context(call.session_id, call.step), params)
                if isinstance(result, str):
                    result = Result.success(result)
                if not isinstance(result, Result):
                    raise TypeError(f"execute returned {type(result).__name__}, not skillhost_sdk.Result or str")
                return result._to_wit()
            except InvalidParams as e:
                raise Err(_types.SkillError_InvalidParams(str(e)))
            except (Failed, HostError) as e:
                raise Err(_types.SkillError_Failed(str(e)))
            except Exception as e:  # noqa: BLE001 - every other error becomes a readable `failed`
                traceback.print_exc(file=sys.stderr)
                raise Err(_types.SkillError_Failed(_describe(e)))

    return WitWorld
