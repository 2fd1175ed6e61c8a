"""Helpers of the MCP front end's tests: `timely-fleet up` and `timely-fleet mcp --http` as processes,
the MCP SDK's own client over stdio (the server as a child process) and over streamable HTTP.

Every child process inherits the test session's ROS_DOMAIN_ID (tests/conftest.py)."""

from __future__ import annotations

import os
import re
import socket
import sys
from typing import Any


from processes import ROOT, TF, Proc  # noqa: F401 - ROOT and TF re-exported for the MCP tests

TOOLS = {"list_robots", "send_goal", "send_mission", "goal_status", "cancel_goal", "fleet_status", "memory"}


def up(*args: str) -> Proc:
    p = Proc("up", *args, ready=r"\bready\b")
    p.wait_ready(120)
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mcp_http(*args: str, env: dict[str, str] | None = None) -> tuple[Proc, str]:
    """`timely-fleet mcp --http 127.0.0.1:PORT ...`; (process, URL) once it serves."""
    port = free_port()
    p = Proc("mcp", "--http", f"127.0.0.1:{port}", *args, ready=r"serving MCP over streamable HTTP", env=env)
    p.wait_ready(60)
    return p, f"http://127.0.0.1:{port}/mcp"


def stdio_server(*args: str, env: dict[str, str] | None = None) -> Any:
    """Parameters with which the SDK's client starts `timely-fleet mcp` as its child (stdio)."""
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=sys.executable, args=["-m", "llm_planner_node.cli", "mcp", *args],
                                 env=dict(os.environ if env is None else env), cwd=str(ROOT))


def http_client(url: str, token: str | None) -> Any:
    """The SDK's client over streamable HTTP, with ``Authorization: Bearer <token>`` unless None."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    hc = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"} if token is not None else {},
                            timeout=httpx2.Timeout(30, read=300))
    return Client(streamable_http_client(url, http_client=hc))


def text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


def error_of(result: Any) -> str:
    """The tool error's text; fails unless the call was an error of one sentence without a traceback."""
    assert result.is_error, f"expected a tool error, got {result.structured_content or text(result)}"
    t = text(result)
    assert "\n" not in t and "Traceback" not in t and not t.startswith("Error executing tool"), t
    return t


def leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (the SDK's client raises from task groups)."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


class Progress:
    """A progress callback that keeps every notification (progress, total, message)."""

    def __init__(self) -> None:
        self.items: list[tuple[float, float | None, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.items.append((progress, total, message))

    def segments(self) -> list[int]:
        return [int(m.group(1)) for _p, _t, msg in self.items if (m := re.search(r": segment (\d+): ", msg or ""))]


