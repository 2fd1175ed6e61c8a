"""`timely-fleet mcp`: serve the fleet to AI agents over the Model Context Protocol.

    timely-fleet mcp [--namespace NS] [--params F] [--secret-file F]                 # stdio (an agent host starts it)
    timely-fleet mcp --http [HOST:]PORT [--tokens FILE] [--allowed-host H] ...        # streamable HTTP, bearer tokens
    timely-fleet mcp token add NAME [--robots a,b] [--urgencies normal] [--operator] [--tokens FILE]
    timely-fleet mcp token list|remove NAME [--tokens FILE]

The server is a client of a running planner (``timely-fleet up`` with the same ROS_DOMAIN_ID and
``--namespace``); it starts none. ``--params`` is the fleet YAML the planner runs (robots, skill
sets, urgency presets). Over HTTP every request must carry ``Authorization: Bearer <token>`` with
a token of the token file (only SHA-256 hashes are stored; :mod:`.tokens`); the server binds
127.0.0.1 unless told otherwise: put a TLS reverse proxy in front of anything beyond localhost.
The operator secret (``--secret-file`` or ``TIMELY_FLEET_OPERATOR_SECRET``, as for ``timely-fleet
stop``) lets operator tokens (and the stdio user) cancel goals they did not send.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import socket
import sys
from pathlib import Path
from typing import Any

from timely_robot.errors import CommandError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from llm_planner_node.config.params import DEFAULT_PARAMS
    from llm_planner_node.agents_mcp.tokens import default_tokens_path

    parser.add_argument("--namespace", default="", help="the planner's ROS namespace (as given to `timely-fleet up`)")
    parser.add_argument("--params", default=str(DEFAULT_PARAMS),
                        help="the fleet YAML the planner runs: robots, skill sets, urgency presets (default: %(default)s)")
    parser.add_argument("--http", metavar="[HOST:]PORT", default=None,
                        help="serve streamable HTTP on HOST:PORT (default host 127.0.0.1; path /mcp) instead of stdio; "
                             "every request needs a bearer token of --tokens")
    parser.add_argument("--tokens", metavar="FILE", default=None,
                        help=f"token file of the HTTP transport (default: {default_tokens_path()})")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="HOST[:PORT]",
                        help="HTTP: also accept this Host header (the name a reverse proxy forwards); repeatable")
    parser.add_argument("--secret-file", default=None,
                        help="operator secret (mode 0600; default: $TIMELY_FLEET_OPERATOR_SECRET): lets operator "
                             "tokens cancel any goal")
    parser.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"),
                        help="log level on stderr (default: %(default)s)")
    sub = parser.add_subparsers(dest="mcp_action", metavar="token")
    tok = sub.add_parser("token", help="manage the HTTP transport's bearer tokens",
                         description="manage the HTTP transport's bearer tokens (only their SHA-256 is stored)")
    tsub = tok.add_subparsers(dest="token_action", metavar="add|list|remove", required=True)
    add = tsub.add_parser("add", help="create a token: printed once, only its hash is stored")
    add.add_argument("name", help="who holds it (named in refusals and the log)")
    add.add_argument("--robots", default="all", help="comma-separated robot ids it may task, or 'all' (default)")
    add.add_argument("--urgencies", default="all",
                     help="comma-separated urgency presets it may use, or 'all' (default; also admits explicit "
                          "ert_s/alpha/beta)")
    add.add_argument("--operator", action="store_true", help="may cancel any goal (with the server's operator secret)")
    rm = tsub.add_parser("remove", help="remove a token (refused from the next request on)")
    rm.add_argument("name")
    tsub.add_parser("list", help="list the tokens (names and rights, never a token)")
    for p in (add, rm, tsub.choices["list"]):
        p.add_argument("--tokens", metavar="FILE", default=argparse.SUPPRESS, help="token file (default: as above)")
        p.add_argument("--params", default=argparse.SUPPRESS, help="fleet YAML whose robots and presets are checked")


def _tokens_path(args: argparse.Namespace) -> Path:
    from llm_planner_node.agents_mcp.tokens import default_tokens_path

    return Path(args.tokens).expanduser() if args.tokens else default_tokens_path()


def _names(value: str) -> tuple[str, ...] | None:
    names = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    return None if not names or names == ("all",) else names


def run(args: argparse.Namespace) -> int:
    from llm_planner_node.agents_mcp.tokens import TokenFileError

    try:
        if args.mcp_action == "token":
            return _token_command(args)
        return _serve(args)
    except TokenFileError as e:
        raise CommandError(str(e)) from None


def _token_command(args: argparse.Namespace) -> int:
    from llm_planner_node.config.params import load_params
    from llm_planner_node.agents_mcp.tokens import add_token, read_entries, remove_token

    path = _tokens_path(args)
    if args.token_action == "list":
        entries = read_entries(path, missing_ok=True)
        if not entries:
            print(f"no tokens in {path}")
        for e in entries:
            print(f"{e.name}: robots {'all' if e.robots is None else ','.join(e.robots)}; urgencies "
                  f"{'all' if e.urgencies is None else ','.join(e.urgencies)}; operator {'yes' if e.operator else 'no'}"
                  f"{'; created ' + e.created if e.created else ''}")
        return 0
    if args.token_action == "remove":
        remove_token(path, args.name)
        print(f"removed token '{args.name}' from {path}", file=sys.stderr)
        return 0
    params = load_params(args.params, check=False)
    robots, urgencies = _names(args.robots), _names(args.urgencies)
    for r in robots or ():
        if params.robot(r) is None:
            raise CommandError(f"--robots: unknown robot '{r}' in {args.params} (robots: "
                               f"{', '.join(x.id for x in params.robots[:20])}); give --params for another fleet")
    for u in urgencies or ():
        if u not in params.planner.tuf_presets:
            raise CommandError(f"--urgencies: '{u}' is not in planner.tuf_presets of {args.params} "
                               f"({', '.join(params.planner.tuf_presets)})")
    token = add_token(path, args.name, robots, urgencies, args.operator)
    print(f"token '{args.name}' added to {path} (robots: {'all' if robots is None else ', '.join(robots)}; urgencies: "
          f"{'all' if urgencies is None else ', '.join(urgencies)}; operator: {'yes' if args.operator else 'no'}); "
          "it is shown only now, keep it secret:", file=sys.stderr)
    print(token)
    return 0


def parse_http(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", value
    host = host.strip("[]") or "127.0.0.1"
    try:
        n = int(port)
        if not 0 <= n <= 65535:
            raise ValueError
    except ValueError:
        raise CommandError(f"--http {value}: give [HOST:]PORT, e.g. 8765 or 127.0.0.1:8765") from None
    return host, n


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _serve(args: argparse.Namespace) -> int:
    from llm_planner_node.security.operator_secret import read_secret
    from llm_planner_node.config.params import load_params
    from llm_planner_node.agents_mcp.bridge import FleetBridge
    from llm_planner_node.agents_mcp.server import build_server
    from llm_planner_node.agents_mcp.tokens import Principal, TokenFile

    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format="[%(levelname)s] [%(name)s] %(message)s")
    for noisy in ("mcp", "uvicorn", "uvicorn.error", "uvicorn.access", "httpx", "httpx2"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    params = load_params(args.params, check=False)
    secret = read_secret(args.secret_file)
    tokens = TokenFile(_tokens_path(args)) if args.http else None
    http = parse_http(args.http) if args.http else None
    sock = _listen(*http) if http else None  # a bad address fails here, before ROS starts
    try:
        login = getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container without passwd entry)
        login = "local"
    bridge = FleetBridge(params, args.namespace, secret)
    bridge.start()
    where = bridge.where()
    try:
        server = build_server(bridge, params, args.params, tokens=tokens,
                              local=Principal(login, operator=bool(secret)))
        if http is None:
            print(f"timely-fleet mcp: serving MCP over stdio for the planner in {where} "
                  f"(ROS domain {_domain()}, fleet {args.params})", file=sys.stderr, flush=True)
            server.run("stdio")
        else:
            import anyio

            anyio.run(_serve_http, server, tokens, sock, http[0], args.allowed_host, where, args.params)
    except KeyboardInterrupt:
        pass
    finally:
        left = bridge.in_flight()
        if left:
            print(f"timely-fleet mcp: {len(left)} goal(s) sent by this server are still running and go on: "
                  + ", ".join(f"{g.goal_id[:8]} ({g.robot_id})" for g in left[:20]), file=sys.stderr)
        bridge.close()
    return 0


def _domain() -> str:
    import os

    return os.environ.get("ROS_DOMAIN_ID", "0")


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise CommandError(f"--http {host}:{port}: cannot listen there ({e.strerror or e})") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


async def _serve_http(server: Any, tokens: Any, sock: socket.socket, host: str, allowed: list[str], where: str,
                      params_path: str) -> None:
    import anyio
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    from llm_planner_node.agents_mcp.http_auth import BearerTokens

    security = None
    if host in LOOPBACK:
        hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=hosts + allowed,
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
            + [f"https://{h}" for h in allowed] + [f"http://{h}" for h in allowed])
    elif allowed:
        security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=allowed,
                                             allowed_origins=[f"https://{h}" for h in allowed])
    app = BearerTokens(server.streamable_http_app(host=host, transport_security=security), tokens)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=3,
                            ws="none")
    srv = uvicorn.Server(config)
    port = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    async with anyio.create_task_group() as tg:
        async def serve() -> None:
            await srv.serve(sockets=[sock])
            tg.cancel_scope.cancel()

        tg.start_soon(serve)
        while not srv.started and not srv.should_exit:
            await anyio.sleep(0.02)
        if srv.started:
            print(f"timely-fleet mcp: serving MCP over streamable HTTP at http://{url_host}:{port}/mcp for the planner "
                  f"in {where} (ROS domain {_domain()}, fleet {params_path}); bearer tokens of {tokens.path}",
                  file=sys.stderr, flush=True)
            if host not in LOOPBACK:
                print("timely-fleet mcp: listening beyond localhost without TLS: put a TLS reverse proxy in front "
                      "(docs/guides/agents_mcp.md, TLS)", file=sys.stderr, flush=True)
