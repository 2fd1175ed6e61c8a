"""The HTTP transport's door: every request carries a bearer token of the token file, or is refused.

An ASGI wrapper around the SDK's streamable HTTP app. A request without ``Authorization: Bearer
<token>``, or with a token whose SHA-256 is not in the token file, gets HTTP 401 with a JSON-RPC
error whose message is one sentence (the SDK's client raises it as ``MCPError``); nothing reaches
the MCP session. The tools then read the same header for the caller's rights (robots, urgencies,
operator: :mod:`.tokens`). Refusals are logged with the peer address, never with the token.
"""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger("timely_fleet.mcp")

NO_TOKEN = ("refused: no bearer token: every request to this MCP server needs 'Authorization: Bearer <token>' "
            "(tokens: `timely-fleet mcp token add NAME`)")
NOT_BEARER = "refused: the Authorization header must be 'Bearer <token>'"
WRONG_TOKEN = "refused: the bearer token is not one of this server's tokens"


class BearerTokens:
    def __init__(self, app: Any, tokens: Any) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        auth = ""
        for k, v in scope.get("headers", []):
            if k.lower() == b"authorization":
                auth = v.decode("latin-1").strip()
        if not auth:
            why = NO_TOKEN
        elif not auth.lower().startswith("bearer "):
            why = NOT_BEARER
        elif self.tokens.verify(auth[7:].strip()) is None:
            why = WRONG_TOKEN
        else:
            await self.app(scope, receive, send)
            return
        peer = scope.get("client") or ("?", 0)
        log.warning("%s %s from %s:%s %s", scope.get("method", ""), scope.get("path", ""), peer[0], peer[1], why)
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": why}}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b'Bearer realm="timely-fleet", error="invalid_token"')]})
        await send({"type": "http.response.body", "body": body})
