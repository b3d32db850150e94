"""skillhost's Python SDK test skill: one mode per SDK feature."""

import json

from skillhost_sdk import Context, InvalidParams, Result, world

# Calls this instance has served (mode `count`): 1 in every call of a fresh instance.
CALLS = 0


def execute(ctx: Context, params: dict) -> Result:
    mode, arg = params["mode"], params["arg"]
    if mode == "greet":
        ctx.info(f"greeting {arg}")
        return (
            Result.success(f"hello, {arg} from {ctx.session_id} step {ctx.step}")
            .meta("chars", len(arg))
            .remember("fact", f"greeted {arg} in python", priority=2, tags=["python"])
        )
    if mode == "bad":
        raise InvalidParams("arg: give a number, e.g. {\"arg\": \"3\"}")
    if mode == "boom":
        return {"present": 1}["missing"]
    if mode == "search":
        hits = ctx.memory_search(arg, 5)
        return Result.success("\n".join(h.content for h in hits)).meta("hits", len(hits))
    if mode == "session":
        before = ctx.session_get("py")
        ctx.session_set("py", arg)
        return Result.success(json.dumps({"before": before, "after": ctx.session_get("py"), "keys": ctx.session_keys()}))
    if mode == "count":
        global CALLS
        CALLS += 1
        return Result.success(f"call {CALLS} of this instance")
    raise InvalidParams(f"mode: unknown mode {mode!r}")


WitWorld = world(execute)
