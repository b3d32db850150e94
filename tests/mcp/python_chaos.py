"""Call the `probe` skill in a loop through a load balancer with the official Python MCP SDK
(PyPI `mcp`, 2026-07-28 stateless requests), for tests/chaos.rs.

Usage:
  python_chaos.py URL SECONDS PREFIX

Each call echoes a unique marker (`PREFIX-N`). A call that raises (the balancer's 502, a
connection cut by a killed host, a timeout) is counted as an error and the client is made
again. The script prints one JSON object: every answered call with its marker and what came
back, and every error. It judges nothing itself: tests/chaos.rs checks each answer echoes
its marker and has exactly one audit line.
"""

import asyncio
import json
import sys
import time

from mcp import Client


def structured_of(r):
    s = getattr(r, "structured_content", None)
    if s is None:
        s = getattr(r, "structuredContent", None)
    return s


def describe(e):
    """The exception, and the ones an exception group holds (anyio's task groups wrap them)."""
    inner = getattr(e, "exceptions", None)
    if inner:
        return f"{type(e).__name__}[" + "; ".join(describe(x) for x in inner) + "]"
    return f"{type(e).__name__}: {e}"


async def main():
    url, seconds, prefix = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    deadline = time.monotonic() + seconds
    answered, errors = [], []
    n = 0
    while time.monotonic() < deadline:
        try:
            async with Client(url, mode="auto", raise_exceptions=True) as client:
                while time.monotonic() < deadline:
                    n += 1
                    marker = f"{prefix}-{n}"
                    r = await asyncio.wait_for(client.call_tool("probe", {"mode": "echo", "arg": marker}), 20)
                    answered.append(
                        {
                            "marker": marker,
                            "is_error": bool(getattr(r, "is_error", None) or getattr(r, "isError", None)),
                            "structured": structured_of(r),
                        }
                    )
        except BaseException as e:  # noqa: BLE001 - every failure is data for the test
            if isinstance(e, KeyboardInterrupt):
                raise
            errors.append(describe(e)[:500])
            await asyncio.sleep(0.05)
    print(json.dumps({"answered": answered, "errors": errors}))


if __name__ == "__main__":
    asyncio.run(main())
