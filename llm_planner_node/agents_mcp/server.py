"""The MCP tools and resources of ``timely-fleet mcp`` (official MCP Python SDK, ``MCPServer``).

Tools (names fixed): ``list_robots``, ``send_goal``, ``send_mission``, ``goal_status``,
``cancel_goal``, ``fleet_status``, ``memory``; resources: one per skill set of the fleet
(``timely-fleet://skill-sets/<id>``). Every goal is an ordinary ``PlanTask`` goal of the running
planner (:mod:`.bridge`), so the planner's validation, budgets, fence and approvals apply as to any
other; a held segment shows as the goal's state ("waiting for approval of segment k: ..."). A
mission is an ordinary ``PlanMission`` goal: the planner chooses the robot (docs/guides/missions.md)
among those the caller may task.

Rights: over stdio the agent is the local user (every robot and urgency; operator when the server
holds the operator secret); over HTTP each request carries a bearer token of the token file
(:mod:`.tokens`), which may limit robots and urgencies. A tool error is one sentence that names
the field, never a traceback (:class:`FleetMCP` rewrites argument validation errors and crashes).

No ``from __future__ import annotations`` here: the tools' argument types are built at run time
(the urgency presets of the fleet YAML) and the SDK reads the annotations as objects.
"""

import asyncio
import logging
import re
import time
from typing import Annotated, Any, Literal, Optional

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import ToolAnnotations
from pydantic import Field, ValidationError

from llm_planner_node.agents_mcp.bridge import (AgentGoal, AgentMission, FleetBridge, PlannerNotRunning, feedback_dict,
                                                is_approval_notice, late_segments, mission_dict, result_dict,
                                                sighting_dict)
from llm_planner_node.agents_mcp.tokens import Principal, TokenFile

log = logging.getLogger("timely_fleet.mcp")

PLANNER_WAIT_S = 3.0          # a planner not (yet) discovered: wait this long before "not running"
ANSWER_WAIT_S = 10.0          # wait=false: how long to wait for the planner to admit or refuse the goal
CANCEL_WAIT_S = 10.0          # cancel_goal: the planner's answer, then the goal's end
DEFAULT_TIMEOUT_S = 300.0
MAX_TIMEOUT_S = 3600.0
POLL_S = 0.2
GONE_CHECK_S = 1.0            # a waiting send_goal checks this often that the planner is still there
PLANNER_GONE_S = 2.0          # its action server unseen this long: the planner is gone

INSTRUCTIONS = """\
This server tasks a ROS 2 robot fleet through its LLM planner (timely_fleet). Call list_robots
first: it lists each robot (id, kind, skill set with skill descriptions, known objects, busy or
idle). send_goal sends a natural-language instruction to one robot with a deadline (urgency preset
or an explicit time-utility function ert_s/alpha/beta); the planner writes the plan in segments and
the robot executes them as they come (progress notifications, one per segment). One robot runs one
goal at a time. Every goal passes the planner's validation, safety budgets, geofence and operator
approvals like any other goal; a segment held for approval shows as the goal's state ("waiting for
approval of segment k: ..."), which only a human operator can answer. goal_status follows a goal,
cancel_goal cancels a goal you sent, fleet_status shows the planner's queue, engine and robots.
send_mission gives the fleet one instruction without naming the robot: the planner chooses one
that can do it (from what the robots declare: things they perceive, places, skills) and is free,
runs it as a goal there, moves it to another robot when the first refuses or fails, and returns
who did it, why, and the goal's result. memory tells what the fleet remembers seeing of a thing
(which robot saw it, when and where)."""


class FleetMCP(MCPServer):
    """MCPServer whose tool errors are one sentence: argument validation errors name the field,
    an unexpected failure is logged (with its traceback, on the server's stderr) and reported in
    one line."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as e:
            cause = e.__cause__
            log.error("tool %s failed", name, exc_info=cause)
            what = f"{type(cause).__name__}: {cause}" if cause is not None else str(e)
            raise ToolError(f"{name} failed inside the MCP server ({_one_line(what)}); see the server's log") from None
        except ToolError as e:
            if isinstance(e.__cause__, ValidationError):
                raise ToolError(validation_sentence(name, e.__cause__)) from None
            if isinstance(e.__cause__, ToolError):  # ours, which the SDK prefixes "Error executing tool <name>: "
                raise ToolError(str(e.__cause__)) from None
            raise


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def validation_sentence(tool: str, err: ValidationError) -> str:
    """``robot_id: Input should be a valid string (got 3)`` for each wrong argument, in one sentence."""
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != f"{tool}Arguments") or "arguments"
        msg = e.get("msg", "invalid")
        if e.get("type") == "missing":
            parts.append(f"{loc}: missing (required)")
        else:
            got = e.get("input")
            shown = f" (got {_one_line(repr(got), 60)})" if got is not None and not isinstance(got, dict) else ""
            parts.append(f"{loc}: {msg}{shown}")
    return "; ".join(parts)


def refusal_sentence(reason: str, bridge: FleetBridge) -> str:
    """The planner's rejection reason as the tool's error: the field first, the busy robot's goal described."""
    m = re.search(r"is still executing goal ([0-9a-f]{32})", reason)
    if m:
        reason = reason.replace(m.group(0), f"is busy with goal {bridge.describe_goal(m.group(1))}")
        reason = reason.replace("; send one plan at a time per robot",
                                "; one goal per robot at a time: wait for it to end (goal_status) or cancel it")
    if reason.startswith(("unknown robot", "robot '")):
        return f"robot_id: {reason}"
    return reason


def mission_refusal_sentence(message: str) -> str:
    """A mission the planner refused (REJECTED) as the tool's error: the field first."""
    if message.startswith("no robot"):  # an unknown robot or kind of the selector
        return f"robots: {message}"
    if message.startswith(("the mission has no instruction", "the instruction names nothing")):
        return f"instruction: {message}"
    return message


def mission_progress_text(fb: Any) -> str:
    """One mission event as a progress notification: ``t1 allocated: tello_1 (why)``."""
    return f"{fb.task} {fb.event}: {fb.robot_id} ({fb.text})" if fb.robot_id else f"{fb.task} {fb.event}: {fb.text}"


class GoneCheck:
    """Whether the planner's action server has been unseen long enough to count as gone (checked
    every GONE_CHECK_S while a tool waits on a goal or mission)."""

    def __init__(self, bridge: FleetBridge) -> None:
        self.bridge = bridge
        self.next_check = time.monotonic() + GONE_CHECK_S
        self.since: Optional[float] = None

    def gone(self, now: float) -> bool:
        if now < self.next_check:
            return False
        self.next_check = now + GONE_CHECK_S
        if self.bridge.planner_running():
            self.since = None
        elif self.since is None:
            self.since = now
        elif now - self.since >= self.bridge.planner_gone_after_s(PLANNER_GONE_S):
            return True
        return False


def skill_set_info(skill_set_id: str) -> dict[str, Any]:
    from timely_robot.skills import DEFAULT_SKILL_SETS

    ss = DEFAULT_SKILL_SETS[skill_set_id]
    skills = []
    for s in ss.skills:
        args = []
        for a in s.args:
            arg: dict[str, Any] = {"name": a.name, "type": a.type}
            if a.min is not None:
                arg["min"] = a.min
            if a.max is not None:
                arg["max"] = a.max
            if a.unit:
                arg["unit"] = a.unit
            if a.choices:
                arg["choices"] = list(a.choices)
            if a.optional:
                arg["optional"] = True
            args.append(arg)
        entry: dict[str, Any] = {"name": s.name, "description": s.description, "args": args}
        if s.alias:
            entry["alias"] = s.alias
        if s.returns:
            entry["returns"] = s.returns
        skills.append(entry)
    return {"id": ss.id, "robot_kind": ss.robot_kind, "description": ss.description, "skills": skills}


def skill_set_markdown(skill_set_id: str) -> str:
    from timely_robot.skills import DEFAULT_SKILL_SETS
    from llm_planner_node.prompts.prompt import skill_lines

    ss = DEFAULT_SKILL_SETS[skill_set_id]
    head = f"# Skill set {ss.id} ({ss.robot_kind})\n\n{ss.description}\n\n" if ss.description else \
        f"# Skill set {ss.id} ({ss.robot_kind})\n\n"
    return head + "\n".join(skill_lines(ss)) + "\n"


def build_server(bridge: FleetBridge, params: Any, params_path: str, *, tokens: Optional[TokenFile] = None,
                 local: Principal = Principal("local")) -> FleetMCP:
    """The MCP server over ``bridge``. ``tokens``: the HTTP transport's token file (each request's
    bearer token is its principal); None: stdio, every call is ``local``'s."""
    presets = params.planner.tuf_presets
    preset_names = tuple(presets)
    default_urgency = "normal" if "normal" in presets else preset_names[0]
    robots = {r.id: r for r in params.robots}
    robots_by_id = robots  # send_mission's argument `robots` (the selector) shadows `robots`
    Urgency = Literal.__getitem__(preset_names)  # the fleet YAML's planner.tuf_presets
    preset_text = ", ".join(f"{n} (ert_s {p.ert_s:g}, alpha {p.alpha:g}, beta {p.beta:g})" for n, p in presets.items())
    server = FleetMCP("timely-fleet", title="timely_fleet robot fleet", instructions=INSTRUCTIONS,
                      version=_version(), log_level="WARNING")

    def principal(ctx: Context) -> Principal:
        if tokens is None:
            return local
        headers = ctx.headers or {}
        auth = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        who = tokens.verify(auth[7:].strip()) if auth.lower().startswith("bearer ") else None
        if who is None:  # the HTTP check refused it already; a token removed since then
            raise ToolError("refused: the bearer token is not (or no longer) in the server's token file")
        return who

    async def planner_or_refuse() -> None:
        deadline = time.monotonic() + PLANNER_WAIT_S
        while not bridge.planner_running():
            if time.monotonic() > deadline:
                raise ToolError(bridge.not_running_sentence())
            await asyncio.sleep(0.05)

    def visible(who: Principal, robot_id: str) -> bool:
        return who.operator or who.may_task(robot_id)

    def tuf_of(who: Principal, urgency: Optional[str], ert_s: Optional[float], alpha: Optional[float],
               beta: Optional[float], what: str) -> tuple[str, tuple[float, float, float]]:
        """(the urgency as the goal's record names it, its (ert_s, alpha, beta)): the preset with any
        explicit value over it, when the caller's token allows them (else a ToolError naming the field)."""
        name = urgency or default_urgency
        explicit = [f for f, v in (("ert_s", ert_s), ("alpha", alpha), ("beta", beta)) if v is not None]
        if who.urgencies is not None:
            if explicit:
                raise ToolError(f"{'/'.join(explicit)}: the token '{who.name}' may use only the urgency presets "
                                f"{', '.join(sorted(who.urgencies))}, not an explicit time-utility function")
            if name not in who.urgencies:
                raise ToolError(f"urgency: the token '{who.name}' may not send '{name}' {what} "
                                f"(its urgencies: {', '.join(sorted(who.urgencies)) or 'none'})")
        p = presets[name]
        tuf = (p.ert_s if ert_s is None else ert_s, p.alpha if alpha is None else alpha,
               p.beta if beta is None else beta)
        return (name if not explicit else f"{name} ({', '.join(explicit)} set)"), tuf

    # -- list_robots -------------------------------------------------------------------------------
    @server.tool(name="list_robots", structured_output=True,
                 annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
                 description=(
                     "List the robots this caller may task: id, kind, skill set (every skill with its arguments, "
                     "units, safe ranges and description), the objects the robot knows (from the fleet YAML; "
                     "goals cannot add objects), operator approval marks, whether it is busy or idle and its "
                     "current goal. Also the urgency presets send_goal takes and the instructions the shipped "
                     "planner model knows per robot kind."))
    async def list_robots(ctx: Context) -> dict[str, Any]:
        from llm_planner_node.planner_model.known import PLAN_KIND, known_instructions

        who = principal(ctx)
        try:
            await planner_or_refuse()  # just started: give discovery its moment
        except ToolError:
            pass
        known = known_instructions()
        out_robots, sets = [], {}
        for r in params.robots:
            if not who.may_task(r.id):
                continue
            entry: dict[str, Any] = {"id": r.id, "kind": r.kind, "skill_set": r.skill_set, "adapter": r.adapter,
                                     "objects": list(r.objects)}
            if r.approval is not None:
                entry["approval"] = {"skills": "every segment" if r.approval.all else list(r.approval.skills),
                                     "timeout_s": r.approval.timeout_s}
            entry.update(bridge.robot_state(r.id))
            out_robots.append(entry)
            if r.skill_set not in sets:
                sets[r.skill_set] = skill_set_info(r.skill_set)
                sets[r.skill_set]["known_instructions"] = known.get(PLAN_KIND.get(r.kind, r.kind), [])
        return {"planner": "running" if bridge.planner_running() else bridge.not_running_sentence(),
                "robots": out_robots, "skill_sets": sets,
                "urgency_presets": {n: {"ert_s": p.ert_s, "alpha": p.alpha, "beta": p.beta} for n, p in presets.items()},
                "caller": {"name": who.name, "robots": who.describe_robots(),
                           "urgencies": "all" if who.urgencies is None else sorted(who.urgencies),
                           "operator": who.operator}}

    # -- send_goal ---------------------------------------------------------------------------------
    @server.tool(name="send_goal", structured_output=True,
                 annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                                             open_world_hint=True),
                 description=(
                     "Send a planning goal to one robot: the planner writes a plan for the instruction in "
                     "segments and the robot executes each as it comes. The deadline is a time-utility function: "
                     f"an urgency preset ({preset_text}) or explicit ert_s/alpha/beta. With wait=true (default) "
                     "it returns the result (status SUCCEEDED, NOT_ACHIEVED, CANCELLED, INVALID_PLAN, ROBOT_FAILED, TIMEOUT, "
                     "...; a machine-readable reason; plan text, segments with timing, response time, utility, "
                     "message, and what the robot found: return_value and each skill's answer; NOT_ACHIEVED: the "
                     "plan ran but the action calls in unachieved did not do their action, e.g. goto of a thing "
                     "never in view) and reports one progress "
                     "notification per dispatched segment (and one when a segment waits for operator approval); "
                     "with wait=false it returns the goal id at once (follow it with goal_status). A goal the "
                     "planner refuses (unknown robot, busy robot, bad time-utility function, ...) is an error "
                     "naming the field. The robot's known objects come from the fleet YAML (see list_robots)."))
    async def send_goal(
        robot_id: Annotated[str, Field(description="the robot that executes the plan (an id from list_robots)",
                                       max_length=256)],
        instruction: Annotated[str, Field(description='the task in natural language, e.g. "look for the cat"',
                                          max_length=20000)],
        ctx: Context,
        urgency: Annotated[Optional[Urgency], Field(
            description=f"time-utility preset of the planner's fleet YAML (default {default_urgency}): {preset_text}")] = None,
        ert_s: Annotated[Optional[float], Field(
            description="explicit expected response time (s, > 0): overrides the preset's")] = None,
        alpha: Annotated[Optional[float], Field(
            description="explicit utility slope after the ERT (per second, <= 0): overrides the preset's")] = None,
        beta: Annotated[Optional[float], Field(
            description="explicit maximum utility (> 0): overrides the preset's")] = None,
        wait: Annotated[bool, Field(description="true: wait for the result (bounded by timeout_s); "
                                                "false: return the goal id once the planner has it")] = True,
        timeout_s: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S, description=(
            "with wait=true, how long to wait for the result (s); the goal goes on after it "
            "(goal_status, cancel_goal)"))] = DEFAULT_TIMEOUT_S,
    ) -> dict[str, Any]:
        who = principal(ctx)
        if robot_id not in robots:
            listed = [r for r in robots if who.may_task(r)]
            shown = ", ".join(listed[:20]) + (f", ... ({len(listed)} in all)" if len(listed) > 20 else "")
            raise ToolError(f"robot_id: unknown robot '{robot_id[:64]}' (robots: {shown or 'none for this caller'})")
        if not who.may_task(robot_id):
            raise ToolError(f"robot_id: the token '{who.name}' may not task robot '{robot_id}' "
                            f"(its robots: {who.describe_robots()})")
        label, tuf = tuf_of(who, urgency, ert_s, alpha, beta, "goals")
        await planner_or_refuse()
        ag = bridge.send(who.name, robot_id, instruction, label, tuf)
        log.info("goal %s for %s sent for '%s'", ag.goal_id[:8], robot_id, who.name)
        if not wait:
            await watch_goal(ag, ctx, time.monotonic() + ANSWER_WAIT_S, report=False, until_admitted=True)
            if ag.done:
                return finished(ag)
            return {"goal_id": ag.goal_id, "robot_id": robot_id, "state": ag.state(),
                    "message": f"goal sent; follow it with goal_status('{ag.goal_id}')"}
        done = await watch_goal(ag, ctx, time.monotonic() + timeout_s, report=True)
        if done:
            return finished(ag)
        return {"goal_id": ag.goal_id, "robot_id": robot_id, "state": ag.state(), "segments": ag.segments(),
                "message": (f"no result within timeout_s={timeout_s:g} s; the goal goes on: follow it with "
                            f"goal_status('{ag.goal_id}') or end it with cancel_goal")}

    def finished(ag: AgentGoal) -> dict[str, Any]:
        res = ag.result()
        if int(res.status) == 1:  # REJECTED: refused by the planner's checks
            raise ToolError(refusal_sentence(res.message, bridge))
        return {"goal_id": ag.goal_id, "robot_id": ag.robot_id, "instruction": ag.instruction,
                "urgency": ag.urgency, "tuf": {"ert_s": ag.tuf[0], "alpha": ag.tuf[1], "beta": ag.tuf[2]},
                **result_dict(res, ag.tuf[2])}

    async def watch_goal(ag: AgentGoal, ctx: Context, deadline: float, *, report: bool,
                         until_admitted: bool = False) -> bool:
        """Wait for the goal's end (True) or the deadline (False), sending a progress notification per
        feedback message (a dispatched segment, or an approval wait) when ``report``."""
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        unwatch = ag.watch(lambda: loop.call_soon_threadsafe(event.set))
        sent = 0
        reported: set[int] = set()
        gone = GoneCheck(bridge)
        try:
            while True:
                event.clear()
                if report:
                    with ag._lock:
                        new = list(ag.feedback[sent:])
                    for fb in new:
                        sent += 1
                        if not is_approval_notice(fb):
                            reported.add(int(fb.index))
                        await ctx.report_progress(sent, None, progress_text(ag, fb))
                if ag.done:
                    if report:  # a segment's feedback may come after the result: report it from the result
                        for fb in late_segments(ag.result(), reported):
                            sent += 1
                            await ctx.report_progress(sent, None, progress_text(ag, fb))
                    return True
                if until_admitted and (ag.admitted or ag.feedback):
                    return False
                if not await next_wake(event, deadline, gone, f"goal {ag.goal_id[:8]} ran on robot '{ag.robot_id}'"):
                    return False
        finally:
            unwatch()

    async def next_wake(event: asyncio.Event, deadline: float, gone: GoneCheck, what: str) -> bool:
        """Wait for ``event`` (at most POLL_S); False once ``deadline`` has passed. A planner killed
        without a goodbye is said at once (ToolError), not waited out."""
        now = time.monotonic()
        remaining = deadline - now
        if remaining <= 0:
            return False
        if gone.gone(now):
            raise ToolError(f"the planner stopped while {what}: its action server in {bridge.where()} "
                            "disappeared; the robot's adapter stops the robot when the planner's lease runs out")
        try:
            await asyncio.wait_for(event.wait(), min(remaining, POLL_S))
        except asyncio.TimeoutError:
            pass
        return True

    def progress_text(ag: AgentGoal, fb: Any) -> str:
        if is_approval_notice(fb):
            return f"{ag.robot_id}: {fb.text}"
        d = feedback_dict(fb)
        return (f"{ag.robot_id}: segment {d['index']}: {d['text'].strip()!r} -> {', '.join(d['skills']) or '-'} "
                f"(queued {d['queue_s'] * 1000:.0f} ms, generated in {d['generation_s'] * 1000:.0f} ms)"
                f"{' [final]' if d['final'] else ''}")

    # -- send_mission ------------------------------------------------------------------------------
    @server.tool(name="send_mission", structured_output=True,
                 annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                                             open_world_hint=True),
                 description=(
                     "Give the fleet one instruction without naming the robot: the planner chooses a robot that can "
                     "do it (from what each robot declares: the things it perceives or holds, its places, its "
                     "skills; never the model) and is free (no goal running, battery and link fine), runs it there "
                     "as a goal and moves it to the next able robot when the first refuses it or fails. robots "
                     "narrows the choice (robot ids or kinds, comma-separated); a token limited to some robots "
                     "narrows it to those. The deadline is as send_goal's: an urgency preset "
                     f"({preset_text}) or explicit ert_s/alpha/beta. Reports one progress notification per event "
                     "(a task allocated to a robot and why, refused, moved, ended) and returns the mission's status "
                     "(SUCCEEDED; FAILED: its goal ended otherwise; IMPOSSIBLE: no robot can, with why robot by "
                     "robot; UNAVAILABLE: robots can but none is free; CANCELLED), its message, and per task the "
                     "robot, why it was chosen, the robots it left and why, its goal id (goal_status follows it) "
                     "and the goal's status, answers and return value. A mission the planner refuses (no "
                     "instruction, an unknown robot or kind, an instruction naming nothing a robot declares and no "
                     "robots, a bad time-utility function) is an error naming the field."))
    async def send_mission(
        instruction: Annotated[str, Field(description='the task in natural language, e.g. "find the cat"',
                                          max_length=20000)],
        ctx: Context,
        robots: Annotated[Optional[str], Field(description=(
            "only these robots or kinds, comma-separated: robot ids from list_robots or kinds (drone, arm, base, "
            "chat), e.g. 'tello_1,tello_2' or 'drone'; default: any robot this caller may task"), max_length=4000)] = None,
        urgency: Annotated[Optional[Urgency], Field(
            description=f"time-utility preset of the planner's fleet YAML (default {default_urgency}): {preset_text}")] = None,
        ert_s: Annotated[Optional[float], Field(
            description="explicit expected response time (s, > 0): overrides the preset's")] = None,
        alpha: Annotated[Optional[float], Field(
            description="explicit utility slope after the ERT (per second, <= 0): overrides the preset's")] = None,
        beta: Annotated[Optional[float], Field(
            description="explicit maximum utility (> 0): overrides the preset's")] = None,
        timeout_s: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S, description=(
            "how long to wait for the mission's end (s); it goes on after it (its task's goal: goal_status, "
            "cancel_goal)"))] = DEFAULT_TIMEOUT_S,
    ) -> dict[str, Any]:
        from llm_planner_node.service.missions import parse_selector

        who = principal(ctx)
        if who.robots is not None and not who.robots:
            raise ToolError(f"the token '{who.name}' may task no robot, so it may send no mission")
        ids, kinds = parse_selector(robots or "")
        unknown = [n for n in ids if n not in robots_by_id]
        if unknown:
            listed = [r for r in robots_by_id if who.may_task(r)]
            shown = ", ".join(listed[:20]) + (f", ... ({len(listed)} in all)" if len(listed) > 20 else "")
            kinds_seen = dict.fromkeys(r.kind for r in params.robots if who.may_task(r.id))
            raise ToolError(f"robots: unknown robot '{unknown[0][:64]}' (robots: {shown or 'none for this caller'}; "
                            f"kinds: {', '.join(kinds_seen) or 'none'})")
        if who.robots is not None:  # the selector sent: the requested robots that the token may task
            allowed = [r.id for r in params.robots if who.may_task(r.id) and (not ids or r.id in ids)
                       and (not kinds or r.kind in kinds)]
            if not allowed:
                asked = f"the robots this mission names ({', '.join([*ids, *kinds])})" if ids or kinds else \
                    "the fleet's robots"
                raise ToolError(f"robots: the token '{who.name}' may task none of {asked} (its robots: "
                                f"{who.describe_robots()}); the mission was not sent")
            ids = allowed
        label, tuf = tuf_of(who, urgency, ert_s, alpha, beta, "missions")
        await planner_or_refuse()
        seen_by = time.monotonic() + PLANNER_WAIT_S   # the plan_mission server seen by then,
        answered_by = seen_by + ANSWER_WAIT_S          # and answering our handshake by then
        while not bridge.mission_server_answers():
            now = time.monotonic()
            if now > answered_by or (now > seen_by and not bridge.mission_server_seen()):
                raise ToolError(f"the planner in {bridge.where()} serves no 'plan_mission' action (or it does not "
                                "answer): missions need a planner that serves them (`timely-fleet up`)")
            await asyncio.sleep(0.05)
        am = bridge.send_mission(who.name, instruction, tuple(ids), tuple(kinds), label, tuf)
        log.info("mission %s sent for '%s' (robots: %s)", am.mission_id[:8], who.name,
                 ", ".join([*ids, *kinds]) or "any")
        if await watch_mission(am, ctx, time.monotonic() + timeout_s):
            res = mission_dict(am.result())
            if res["status"] == "REJECTED":  # the mission itself is not acceptable
                raise ToolError(mission_refusal_sentence(res["message"]))
            return {**mission_head(am), **res, "events": am.events()}
        goals = [e["goal_id"] for e in am.events() if e["goal_id"]]
        follow = f": follow its task's goal with goal_status('{goals[-1]}')" if goals else ""
        return {**mission_head(am), "status": "RUNNING", "events": am.events(),
                "message": f"no result within timeout_s={timeout_s:g} s; the mission goes on{follow}"}

    def mission_head(am: AgentMission) -> dict[str, Any]:
        return {"mission_id": am.mission_id, "instruction": am.instruction,
                "robots": {"ids": list(am.robot_ids), "kinds": list(am.robot_kinds)}, "urgency": am.urgency,
                "tuf": {"ert_s": am.tuf[0], "alpha": am.tuf[1], "beta": am.tuf[2]}}

    async def watch_mission(am: AgentMission, ctx: Context, deadline: float) -> bool:
        """Wait for the mission's end (True) or the deadline (False), one progress notification per event."""
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        unwatch = am.watch(lambda: loop.call_soon_threadsafe(event.set))
        sent = 0
        gone = GoneCheck(bridge)
        try:
            while True:
                event.clear()
                with am._lock:
                    new = list(am.feedback[sent:])
                for fb in new:
                    sent += 1
                    await ctx.report_progress(sent, None, mission_progress_text(fb))
                if am.done:
                    return True
                if not await next_wake(event, deadline, gone, f"mission {am.mission_id[:8]} ran"):
                    return False
        finally:
            unwatch()

    # -- goal_status -------------------------------------------------------------------------------
    @server.tool(name="goal_status", structured_output=True,
                 annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
                 description=(
                     "The state of a goal: sent, queued, running (segments dispatched so far), 'waiting for "
                     "approval of segment k: ...' while an operator must approve a segment, or its result "
                     "(status, plan, segments, response time, utility, message). Goals this server sent, and "
                     "goals of the robots this caller may task that the planner admitted since the server started."))
    async def goal_status(
        goal_id: Annotated[str, Field(description="the goal's id as send_goal returned it (at least its first 8 hex digits)",
                                      max_length=64)],
        ctx: Context,
    ) -> dict[str, Any]:
        who = principal(ctx)
        full, own, seen = resolve(goal_id)
        robot = own.robot_id if own is not None else seen.robot_id
        if not (who.operator or (own is not None and own.owner == who.name) or who.may_task(robot)):
            raise ToolError(f"goal_id: goal {full[:8]} is on robot '{robot}', which the token '{who.name}' may not see")
        if own is not None:
            out: dict[str, Any] = {"goal_id": full, "robot_id": own.robot_id, "instruction": own.instruction,
                                   "sent_by": f"this MCP server ({own.owner})", "urgency": own.urgency,
                                   "age_s": round(time.monotonic() - own.sent_mono, 2), "state": own.state()}
            if own.done:
                res = own.result()
                out.update(result_dict(res, own.tuf[2]))
            else:
                out["segments"] = own.segments()
                robot_now = bridge.robot_status.get(own.robot_id)
                if robot_now and robot_now.get("goal_id") == full:
                    out["robot"] = {k: v for k, v in robot_now.items() if k not in ("at", "goal_id") and v != ""}
            return out
        assert seen is not None
        out = {"goal_id": full, "robot_id": seen.robot_id, "instruction": seen.instruction,
               "sent_by": "another client", "state": seen.result["status"] if seen.result else "running"}
        if seen.result:
            out.update(seen.result)
        return out

    def resolve(goal_id: str) -> tuple[str, Optional[AgentGoal], Any]:
        try:
            return bridge.resolve(goal_id)
        except ValueError as e:
            raise ToolError(str(e) if str(e).startswith("goal_id") else f"goal_id: {e}") from None

    # -- cancel_goal -------------------------------------------------------------------------------
    @server.tool(name="cancel_goal", structured_output=True,
                 annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                             open_world_hint=True),
                 description=(
                     "Cancel a goal: one this caller sent through this server (with the goal's own cancel key), "
                     "or any goal with an operator token. The robot is stopped and brought to a known idle state "
                     "(drone: hover; arm: stop). Returns the planner's answer and, once it has ended, the goal's "
                     "status (CANCELLED)."))
    async def cancel_goal(
        goal_id: Annotated[str, Field(description="the goal's id (at least its first 8 hex digits)", max_length=64)],
        ctx: Context,
    ) -> dict[str, Any]:
        who = principal(ctx)
        gid = goal_id.strip().lower()
        if who.operator and re.fullmatch(r"[0-9a-f]{32}", gid) and not bridge.knows(gid):
            full, own, seen = gid, None, None  # admitted before this server started: the planner knows it
        else:
            full, own, seen = resolve(goal_id)
        ended = (own.state() if own.done else "") if own is not None else ((seen.result or {}).get("status")
                                                                           if seen is not None else "")
        if ended:
            raise ToolError(f"goal_id: goal {full[:8]} has already ended ({ended})")
        try:
            if own is not None and own.owner == who.name:
                fut = await anyio.to_thread.run_sync(bridge.cancel_own, own)
            elif who.operator:
                if not bridge.operator_secret:
                    raise ToolError(f"goal_id: goal {full[:8]} is not yours and this MCP server holds no operator "
                                    "secret (start it with TIMELY_FLEET_OPERATOR_SECRET or --secret-file)")
                fut = await anyio.to_thread.run_sync(bridge.cancel_as_operator, full)
            else:
                sender = f"another agent ('{own.owner}') of this MCP server" if own is not None else "another client"
                raise ToolError(f"goal_id: goal {full[:8]} was sent by {sender}; only its sender or an operator "
                                "token may cancel it (the planner accepts its cancel only with the goal's cancel key)")
        except (PlannerNotRunning, TimeoutError) as e:
            raise ToolError(f"goal_id: goal {full[:8]} could not be cancelled: {e}") from None
        deadline = time.monotonic() + CANCEL_WAIT_S
        while not fut.done():
            if time.monotonic() > deadline:
                raise ToolError(f"goal_id: the planner did not answer the cancel of goal {full[:8]} within "
                                f"{CANCEL_WAIT_S:g} s")
            await asyncio.sleep(0.02)
        answer = fut.result()
        accepted = bool(getattr(answer, "accepted", getattr(answer, "return_code", 1) == 0))
        message = getattr(answer, "message", "")
        if not accepted:
            raise ToolError(f"goal_id: the planner refused to cancel goal {full[:8]}: {message or 'refused'}")
        log.info("goal %s cancelled for '%s'", full[:8], who.name)
        while time.monotonic() < deadline:  # the goal's end (the robot stopped)
            seen = bridge.seen.get(full, seen)
            if (own is not None and own.done) or (own is None and seen is not None and seen.result):
                break
            await asyncio.sleep(0.05)
        if own is not None:
            status = own.state() if own.done else None
        else:
            status = (seen.result or {}).get("status") if seen is not None else None
        out: dict[str, Any] = {"goal_id": full, "accepted": True, "message": message or "cancelling",
                               "status": status or "CANCELLING"}
        if own is not None and own.done:
            out["result_message"] = own.result().message
        return out

    # -- fleet_status ------------------------------------------------------------------------------
    @server.tool(name="fleet_status", structured_output=True,
                 annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
                 description=(
                     "The planner's state from its diagnostics: queue (generations waiting, running, suspended, "
                     "goals in flight, counters), the engine (up or failed, tokens/s, KV cache), robots "
                     "(reporting or silent, link security), operator events (approvals waiting), and each robot's "
                     "state (busy or idle, current goal, latest robot status)."))
    async def fleet_status(ctx: Context) -> dict[str, Any]:
        who = principal(ctx)
        await planner_or_refuse()
        deadline = time.monotonic() + 1.5  # both are published once per second
        while (bridge.stats is None or not bridge.diagnostics) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        now = time.monotonic()
        diags = {name.split(": ", 1)[-1]: d for name, d in sorted(bridge.diagnostics.items())}
        engine = diags.get("engine", {})
        return {
            "planner": {"namespace": "/" + bridge.namespace, "action_server": "running",
                        "engine": engine.get("message", "unknown (no diagnostics yet)"),
                        "queue": bridge.stats, "stats_age_s": round(now - bridge.stats_at, 1) if bridge.stats else None,
                        "diagnostics": diags,
                        "diagnostics_age_s": round(now - bridge.diagnostics_at, 1) if diags else None},
            "robots": {r.id: bridge.robot_state(r.id) for r in params.robots if visible(who, r.id)},
            "this_server": {"goals_in_flight": len(bridge.in_flight()), "goals_remembered": len(bridge.goals)},
        }

    # -- memory ------------------------------------------------------------------------------------
    @server.tool(name="memory", structured_output=True,
                 annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
                 description=(
                     "What the fleet remembers seeing of one thing (the planner's fleet memory): its sightings, "
                     "newest first, each with the robot that saw it, when (UNIX time, ISO 8601 UTC, age), where "
                     "(the robot's position in the fleet frame in metres, or null when unknown), the detector's "
                     "confidence (or null) and the goal the robot ran. A sighting is a perception call that found "
                     "the thing (scan(cat) -> True) or what an idle robot's camera showed. A label matches by "
                     "any of the thing's names ('cats', 'kitty' find 'cat'). Only sightings by the robots this "
                     "caller may task."))
    async def memory(
        label: Annotated[str, Field(description='the thing, by any of its names, e.g. "cat"', min_length=1,
                                    max_length=200)],
        ctx: Context,
        max_results: Annotated[int, Field(ge=1, le=100, description="at most this many sightings, newest first")] = 5,
    ) -> dict[str, Any]:
        who = principal(ctx)
        await planner_or_refuse()
        if bridge.memory_service is None:
            raise ToolError("this MCP server's ROS interfaces have no fleet memory (timely_fleet/srv/QueryMemory): "
                            "rebuild them (`make setup`)")
        deadline = time.monotonic() + PLANNER_WAIT_S
        while not bridge.memory_answers():
            if time.monotonic() > deadline:
                raise ToolError(f"the planner in {bridge.where()} serves no 'planner/memory' service")
            await asyncio.sleep(0.05)
        limited = not (who.operator or who.robots is None)
        fut = bridge.query_memory(label, 100 if limited else max_results)  # others' sightings are left out below
        deadline = time.monotonic() + CANCEL_WAIT_S
        while fut is not None and not fut.done():
            if time.monotonic() > deadline:
                raise ToolError(f"the planner did not answer the memory query within {CANCEL_WAIT_S:g} s")
            await asyncio.sleep(0.02)
        if fut is None:
            raise ToolError("the MCP server is shutting down")
        res = fut.result()
        now = time.time()
        seen = [m for m in res.sightings if visible(who, m.robot_id)][:max_results]
        message = res.message
        if limited and len(seen) < min(len(res.sightings), max_results):
            message = (f"{len(seen)} sighting(s) of \"{label}\" by the robots the token '{who.name}' may task"
                       if seen else f"nothing remembered about \"{label}\" by the robots the token '{who.name}' "
                                    "may task")
        return {"label": label, "message": message, "sightings": [sighting_dict(m, now) for m in seen]}

    # -- resources: the skill sets -------------------------------------------------------------------
    def reader_of(set_id: str) -> Any:
        def reader() -> str:
            return skill_set_markdown(set_id)
        return reader

    for set_id in dict.fromkeys(r.skill_set for r in params.robots):
        server.resource(f"timely-fleet://skill-sets/{set_id}", name=f"skill set {set_id}",
                        description=f"the skills of skill set '{set_id}': arguments, units, safe ranges, descriptions",
                        mime_type="text/markdown")(reader_of(set_id))
    return server


def _version() -> str:
    from llm_planner_node import __version__

    return __version__
