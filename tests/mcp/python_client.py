"""Drive `skillhost mcp` with the official Python MCP SDK (PyPI `mcp`) and print what it saw.

Usage:
  python_client.py stdio MODE SKILLHOST_BIN HOME WORKSPACE
  python_client.py http MODE URL

MODE is the SDK's connect mode: `legacy` (2025-11-25 initialize handshake) or `auto`
(2026-07-28 `server/discover`, falling back to the handshake). The script prints one JSON
object; tests/mcp_clients.rs asserts on it. It judges nothing itself, so a wrong answer from
the server shows up as a failed assertion with the data next to it.
"""

import asyncio
import json
import sys

from mcp import Client, StdioServerParameters


def text_of(content):
    return "".join(getattr(c, "text", "") or "" for c in content)


async def exercise(client):
    out = {}
    tools = await client.list_tools()
    out["tools"] = [
        {
            "name": t.name,
            "description": t.description,
            "input_schema": t.input_schema if hasattr(t, "input_schema") else t.inputSchema,
            "has_output_schema": (getattr(t, "output_schema", None) or getattr(t, "outputSchema", None)) is not None,
            "read_only": t.annotations.read_only_hint if t.annotations else None,
            "open_world": t.annotations.open_world_hint if t.annotations else None,
            "destructive": t.annotations.destructive_hint if t.annotations else None,
        }
        for t in tools.tools
    ]

    def result(r):
        structured = getattr(r, "structured_content", None)
        if structured is None:
            structured = getattr(r, "structuredContent", None)
        return {
            "is_error": bool(getattr(r, "is_error", None) or getattr(r, "isError", None)),
            "structured": structured,
            "text": text_of(r.content),
        }

    out["read_log"] = result(
        await client.call_tool("read-log-file", {"path": "/workspace/uart.log", "level": "ERROR", "max_lines": 5})
    )
    out["kb"] = result(await client.call_tool("query-issue-kb", {"query": "uart overrun"}))
    out["bad_params"] = result(await client.call_tool("read-log-file", {"max_lines": "lots"}))
    out["escape"] = result(await client.call_tool("read-log-file", {"path": "/etc/passwd"}))
    out["memory_search"] = result(await client.call_tool("memory_search", {"query": "uart baud"}))
    resources = await client.list_resources()
    out["resources"] = [str(r.uri) for r in resources.resources]
    memory = await client.read_resource("skillhost://memory/MEMORY.md")
    out["memory_md"] = "".join(getattr(c, "text", "") or "" for c in memory.contents)
    prompts = await client.list_prompts()
    out["prompts"] = [p.name for p in prompts.prompts]
    prompt = await client.get_prompt("publish-npm-package")
    out["prompt_text"] = "".join(text_of([m.content]) for m in prompt.messages)
    return out


async def main():
    kind, mode = sys.argv[1], sys.argv[2]
    if kind == "stdio":
        bin_, home, workspace = sys.argv[3:6]
        server = StdioServerParameters(
            command=bin_, args=["--home", home, "--workspace", workspace, "mcp", "--memory", "write"]
        )
    else:
        server = sys.argv[3]
    async with Client(server, mode=mode, raise_exceptions=True) as client:
        out = await exercise(client)
    print(json.dumps(out))


asyncio.run(main())
