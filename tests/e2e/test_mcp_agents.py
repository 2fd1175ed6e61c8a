"""Agents task the fleet through `timely-fleet mcp`, with the MCP SDK's own client.

`timely-fleet up --engine sim` runs the default fleet (config/fleet.yaml: drones tello_1 and tello_2,
arm indy_1, chat robot chat_1; its mobile base left out; signed robot link; robots at time scale 0.2) as its own
process, with one addition to the YAML: an operator secret's SHA-256 (security.cancel_operator_keys_sha256).
The MCP server runs as the SDK client's child over stdio, and as `timely-fleet mcp --http` with a
token file made by `timely-fleet mcp token add`. A second fleet in namespace /swarm (50 simulated
drones at time scale 0.02, and one whose every segment waits for an operator's approval) takes 50
concurrent send_goal calls from 5 HTTP sessions. Every process inherits this test session's
ROS_DOMAIN_ID (tests/conftest.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import time

import anyio
import pytest
import yaml
from mcp import Client
from mcp_testkit import ROOT, TF, TOOLS, Progress, error_of, http_client, leaf, mcp_http, stdio_server, text, up

pytestmark = pytest.mark.ros

SECRET = "mcp-test-operator-secret"
GOALS = {"tello_1": "look for the cat", "tello_2": "find a toy under the bed", "indy_1": "clean the desk",
         "chat_1": "tell a short story about a robot"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mcp_fleet")
    data = yaml.safe_load((ROOT / "config" / "fleet.yaml").read_text())
    # one robot of each kind the simulated engine plans the papers' tasks for (its base plans
    # only three base traces: the mobile base is tested over ROS in test_base_over_ros.py)
    data["robots"] = [r for r in data["robots"] if r["kind"] != "base"]
    data.setdefault("security", {})["cancel_operator_keys_sha256"] = hashlib.sha256(SECRET.encode()).hexdigest()
    params = tmp / "fleet.yaml"
    params.write_text(yaml.safe_dump(data))
    u = up("--params", str(params), "--engine", "sim", "--time-scale", "0.2")
    u.params, u.tmp = str(params), tmp
    yield u
    log = u.stop()
    assert "Traceback" not in log, log[-3000:]


def plain_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "TIMELY_FLEET_OPERATOR_SECRET"}


async def goal_state(c: Client, goal_id: str) -> dict:
    r = await c.call_tool("goal_status", {"goal_id": goal_id})
    assert not r.is_error, text(r)
    return r.structured_content


async def wait_state(c: Client, goal_id: str, pattern: str, timeout: float = 60) -> dict:
    with anyio.fail_after(timeout):
        while True:
            st = await goal_state(c, goal_id)
            if re.match(pattern, st["state"]):
                return st
            await anyio.sleep(0.1)


def test_stdio_tools_with_schemas_and_a_goal_to_each_robot_kind_succeeds(fleet):
    async def main() -> None:
        async with Client(stdio_server("--params", fleet.params, env=plain_env())) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == TOOLS
            for t in tools.values():
                assert len(t.description or "") > 60, t.name
                for name, prop in t.input_schema.get("properties", {}).items():
                    assert prop.get("description"), (t.name, name)
            sg = tools["send_goal"].input_schema
            assert set(sg["required"]) == {"robot_id", "instruction"}
            assert {"robot_id", "instruction", "urgency", "ert_s", "alpha", "beta", "wait", "timeout_s"} <= \
                set(sg["properties"])
            urgency = json.dumps(sg["properties"]["urgency"])
            assert '"normal"' in urgency and '"urgent"' in urgency
            assert sg["properties"]["wait"]["default"] is True and sg["properties"]["timeout_s"]["default"] > 0
            for name in ("goal_status", "cancel_goal"):
                assert tools[name].input_schema["required"] == ["goal_id"]
            assert tools["list_robots"].annotations.read_only_hint is True

            r = await c.call_tool("list_robots", {})
            assert not r.is_error, text(r)
            out = r.structured_content
            assert out["planner"] == "running"
            robots = {x["id"]: x for x in out["robots"]}
            assert {k: v["kind"] for k, v in robots.items()} == {"tello_1": "drone", "tello_2": "drone",
                                                                  "indy_1": "arm", "chat_1": "chat"}
            assert all(v["state"] == "idle" for v in robots.values()), robots
            assert "desk" in robots["indy_1"]["objects"]
            drone_skills = {s["name"]: s for s in out["skill_sets"]["tello_minispec"]["skills"]}
            assert drone_skills["move_forward"]["description"] and drone_skills["move_forward"]["args"][0]["max"] > 0
            assert "look for the cat" in out["skill_sets"]["tello_minispec"]["known_instructions"]
            assert set(out["urgency_presets"]) == {"normal", "urgent"}
            uris = {str(x.uri) for x in (await c.list_resources()).resources}
            assert uris == {f"timely-fleet://skill-sets/{s}" for s in ("tello_minispec", "indy7_arm", "chat")}
            arm = await c.read_resource("timely-fleet://skill-sets/indy7_arm")
            assert "pick(" in arm.contents[0].text

            results, progress = {}, {}

            async def send(robot: str, instruction: str) -> None:
                progress[robot] = Progress()
                results[robot] = await c.call_tool("send_goal", {"robot_id": robot, "instruction": instruction},
                                                   progress_callback=progress[robot])

            async with anyio.create_task_group() as tg:  # one goal per robot kind, side by side
                for robot, instruction in GOALS.items():
                    tg.start_soon(send, robot, instruction)
            for robot, instruction in GOALS.items():
                r = results[robot]
                assert not r.is_error, text(r)
                res = r.structured_content
                assert res["status"] == "SUCCEEDED", res
                assert res["robot_id"] == robot and res["instruction"] == instruction
                assert res["plan_text"] and len(res["segments"]) >= 2, res
                assert res["plan_text"] == "".join(s["text"] for s in res["segments"])
                assert 0 <= res["response_time_s"] < 5 and res["time_utility"] > 0 and res["max_utility"] == 1.0
                assert res["message"].startswith("plan of ")
                # one progress notification per dispatched segment, in order, before the result
                assert progress[robot].segments() == list(range(len(res["segments"]))), progress[robot].items
                assert [p for p, _t, _m in progress[robot].items] == list(range(1, len(res["segments"]) + 1))
                assert all(robot in (m or "") for _p, _t, m in progress[robot].items)
                st = await goal_state(c, res["goal_id"])
                assert st["state"] == "SUCCEEDED" and st["plan_text"] == res["plan_text"]
            # what the robot found reaches the agent: tello_1 streams a room with a cat in it
            assert {"segment": 1, "skill": "scan(cat)", "value": "True"} in results["tello_1"].structured_content["answers"]

    anyio.run(main)


def test_refusals_are_one_sentence_naming_the_field(fleet):
    async def main() -> None:
        async with Client(stdio_server("--params", fleet.params, env=plain_env())) as c:
            e = error_of(await c.call_tool("send_goal", {"robot_id": "tello_9", "instruction": "look for the cat"}))
            assert e == "robot_id: unknown robot 'tello_9' (robots: tello_1, tello_2, indy_1, chat_1)"
            r = await c.call_tool("send_goal", {"robot_id": "tello_2", "instruction": "look for the cat",
                                                "wait": False})
            assert not r.is_error, text(r)
            first = r.structured_content["goal_id"]
            # admitted (or already running: the goal record and the first segment travel on different topics)
            assert re.fullmatch(r"[0-9a-f]{32}", first) and re.match(r"queued|running", r.structured_content["state"])
            e = error_of(await c.call_tool("send_goal", {"robot_id": "tello_2", "instruction": "find a toy under the bed"}))
            assert re.match(rf"robot_id: robot 'tello_2' is busy with goal {first[:8]} \(\"look for the cat\", sent "
                            r"through this MCP server by '[^']+' \d+\.\d s ago\); one goal per robot at a time", e), e
            # the time-utility function: the planner's own checks, its reason naming the field
            bad = {"ert_s": -1.0, "alpha": 0.5, "beta": 0.0}
            for field, value in bad.items():
                e = error_of(await c.call_tool("send_goal", {"robot_id": "chat_1", "instruction": GOALS["chat_1"],
                                                             field: value}))
                assert e.startswith(f"{field} must be"), e
            e = error_of(await c.call_tool("send_goal", {"robot_id": 7, "instruction": "look for the cat"}))
            assert e.startswith("robot_id: Input should be a valid string"), e
            e = error_of(await c.call_tool("send_goal", {"robot_id": "chat_1", "instruction": "hi", "urgency": "asap"}))
            assert e.startswith("urgency: Input should be 'normal' or 'urgent'"), e
            e = error_of(await c.call_tool("send_goal", {"robot_id": "chat_1"}))
            assert e == "instruction: missing (required)", e
            e = error_of(await c.call_tool("send_goal", {"robot_id": "chat_1", "instruction": "hi", "timeout_s": -3}))
            assert e.startswith("timeout_s: Input should be greater than 0"), e
            e = error_of(await c.call_tool("goal_status", {"goal_id": "xyz"}))
            assert e.startswith("goal_id must be the goal's id"), e
            e = error_of(await c.call_tool("goal_status", {"goal_id": "0123456789abcdef"}))
            assert e.startswith("goal_id: no goal '0123456789abcdef' is known"), e

            r = await c.call_tool("fleet_status", {})
            assert not r.is_error, text(r)
            fs = r.structured_content
            assert fs["planner"]["engine"].startswith("engine up (sim"), fs
            assert {"engine", "goals", "robots", "operator"} <= set(fs["planner"]["diagnostics"])
            assert fs["planner"]["queue"]["policy"] == "timelyllm"
            assert set(fs["robots"]) == {"tello_1", "tello_2", "indy_1", "chat_1"}
            assert fs["robots"]["tello_2"]["state"] == "busy"
            assert fs["robots"]["tello_2"]["current_goal"]["goal_id"] == first
            st = await wait_state(c, first, r"SUCCEEDED|[A-Z_]+$")
            assert st["state"] == "SUCCEEDED", st

        # a server whose planner is not there (another namespace): one sentence, at once
        async with Client(stdio_server("--params", fleet.params, "--namespace", "nowhere", env=plain_env())) as c:
            for tool, args in (("send_goal", {"robot_id": "chat_1", "instruction": "hi"}), ("fleet_status", {})):
                e = error_of(await c.call_tool(tool, args))
                assert e.startswith("the planner is not running: no 'plan_task' action server in namespace "
                                    "'/nowhere' on ROS domain"), e

    anyio.run(main)


def test_cancel_of_its_own_goal_works_and_of_another_clients_is_refused(fleet):
    async def main() -> None:
        async with Client(stdio_server("--params", fleet.params, env=plain_env())) as c:
            r = await c.call_tool("send_goal", {"robot_id": "indy_1", "instruction": "clean the desk", "wait": False})
            mine = r.structured_content["goal_id"]
            await wait_state(c, mine, r"running")
            r = await c.call_tool("cancel_goal", {"goal_id": mine[:8]})
            assert not r.is_error, text(r)
            assert r.structured_content["accepted"] is True and r.structured_content["status"] == "CANCELLED", \
                r.structured_content
            assert (await goal_state(c, mine))["state"] == "CANCELLED"
            e = error_of(await c.call_tool("cancel_goal", {"goal_id": mine}))
            assert e == f"goal_id: goal {mine[:8]} has already ended (CANCELLED)"

            # another client's goal (`timely-fleet goal`: protected by its own cancel key)
            other = subprocess.Popen([*TF, "goal", "indy_1", "clean the desk", "--timeout", "120"], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                theirs = None
                with anyio.fail_after(30):
                    while theirs is None:
                        r = await c.call_tool("list_robots", {})
                        arm = next(x for x in r.structured_content["robots"] if x["id"] == "indy_1")
                        if arm.get("current_goal", {}).get("sent_by") == "another client":
                            theirs = arm["current_goal"]["goal_id"]
                        await anyio.sleep(0.1)
                e = error_of(await c.call_tool("cancel_goal", {"goal_id": theirs}))
                assert e == (f"goal_id: goal {theirs[:8]} was sent by another client; only its sender or an operator "
                             "token may cancel it (the planner accepts its cancel only with the goal's cancel key)")
                st = await goal_state(c, theirs)
                assert st["sent_by"] == "another client" and st["state"] == "running", st
                # an operator (the stdio user holding the operator secret) may cancel it
                env = plain_env() | {"TIMELY_FLEET_OPERATOR_SECRET": SECRET}
                async with Client(stdio_server("--params", fleet.params, env=env)) as op:
                    r = await op.call_tool("cancel_goal", {"goal_id": theirs})
                    assert not r.is_error, text(r)
                    assert r.structured_content["status"] == "CANCELLED", r.structured_content
                out, _ = other.communicate(timeout=60)
                assert "CANCELLED" in out, out
            finally:
                if other.poll() is None:
                    other.kill()
                    other.wait()

    anyio.run(main)


def test_a_mission_goes_to_the_robot_that_can_do_it_and_succeeds(fleet):
    async def main() -> None:
        async with Client(stdio_server("--params", fleet.params, env=plain_env())) as c:
            schema = {t.name: t for t in (await c.list_tools()).tools}["send_mission"].input_schema
            assert schema["required"] == ["instruction"]
            assert {"robots", "urgency", "ert_s", "alpha", "beta", "timeout_s"} <= set(schema["properties"])
            # the desk is in the arm's workspace (fleet YAML objects); no drone can perceive one
            prog = Progress()
            r = await c.call_tool("send_mission", {"instruction": "clean the desk"}, progress_callback=prog)
            assert not r.is_error, text(r)
            res = r.structured_content
            assert res["status"] == "SUCCEEDED" and res["reason"] == "succeeded", res
            assert res["robots"] == {"ids": [], "kinds": []} and res["urgency"] == "normal"
            [task] = res["tasks"]
            assert task["robot_id"] == "indy_1" and task["status"] == "SUCCEEDED", task
            assert task["allocated_why"].startswith("indy_1 (arm): able and free"), task
            assert task["left"] == [] and re.fullmatch(r"[0-9a-f]{32}", task["goal_id"]) and task["plans"], task
            assert re.fullmatch(r"[0-9a-f]{32}", res["mission_id"]) and res["mission_id"] != task["goal_id"]
            # one progress notification per mission event, the allocation first
            assert prog.items and prog.items[0][2].startswith("t1 allocated: indy_1 (indy_1 (arm): able and free"), \
                prog.items
            assert res["events"][0]["event"] == "allocated" and res["events"][0]["goal_id"] == task["goal_id"]
            # the task's goal is an ordinary goal of the planner: goal_status follows it
            st = await wait_state(c, task["goal_id"], r"[A-Z_]+$")  # its result on planner/results may come later
            assert st["robot_id"] == "indy_1" and st["state"] == "SUCCEEDED" and st["sent_by"] == "another client", st

            # an impossible mission is a result that says why, robot by robot
            r = await c.call_tool("send_mission", {"instruction": "pick up the giraffe"})
            assert not r.is_error, text(r)
            res = r.structured_content
            assert res["status"] == "IMPOSSIBLE" and res["tasks"][0]["robot_id"] is None, res
            assert res["tasks"][0]["status"] == "NOT_STARTED" and "indy_1 cannot perceive 'giraffe'" in res["message"]

            # refusals: one sentence naming the field, as send_goal's
            e = error_of(await c.call_tool("send_mission", {"instruction": "look for the cat", "robots": "tello_9"}))
            assert e == "robots: unknown robot 'tello_9' (robots: tello_1, tello_2, indy_1, chat_1; kinds: drone, arm, chat)", e
            e = error_of(await c.call_tool("send_mission", {"instruction": "hum a tune"}))
            assert e.startswith("instruction: the instruction names nothing a robot of the fleet declares"), e
            e = error_of(await c.call_tool("send_mission", {"instruction": "look for the cat", "ert_s": -1.0}))
            assert e.startswith("ert_s must be > 0"), e
            e = error_of(await c.call_tool("send_mission", {"robots": "drone"}))
            assert e == "instruction: missing (required)", e
            e = error_of(await c.call_tool("send_mission", {"instruction": "hi", "urgency": "asap"}))
            assert e.startswith("urgency: Input should be 'normal' or 'urgent'"), e

    anyio.run(main)


@pytest.fixture(scope="module")
def http(fleet):
    tokens = fleet.tmp / "tokens.yaml"
    made = {}
    for name, extra in (("agent", []), ("drones", ["--robots", "tello_1,tello_2", "--urgencies", "normal"]),
                        ("ops", ["--operator"])):
        p = subprocess.run([*TF, "mcp", "token", "add", name, "--tokens", str(tokens), "--params", fleet.params,
                            *extra], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        made[name] = p.stdout.strip()
        assert re.fullmatch(r"tfmcp_[A-Za-z0-9_-]{40,}", made[name]), p.stdout
        assert f"token '{name}' added to {tokens}" in p.stderr
    stored = tokens.read_text()
    assert all(tok not in stored and hashlib.sha256(tok.encode()).hexdigest() in stored for tok in made.values())
    assert oct(tokens.stat().st_mode & 0o777) == "0o600"
    env = plain_env() | {"TIMELY_FLEET_OPERATOR_SECRET": SECRET}
    proc, url = mcp_http("--params", fleet.params, "--tokens", str(tokens), env=env)
    yield url, made, tokens
    log = proc.stop()
    assert "Traceback" not in log, log[-3000:]
    assert all(tok not in log for tok in made.values())  # refusals are logged, tokens never


def test_http_refuses_no_token_a_wrong_token_and_a_robot_outside_the_tokens_list(http, fleet):
    url, tokens, path = http

    async def refused(token: str | None) -> str:
        with pytest.raises(BaseException) as info:
            async with http_client(url, token) as c:
                await c.call_tool("list_robots", {})
        return str(leaf(info.value))

    async def main() -> None:
        assert (await refused(None)).startswith("refused: no bearer token: every request to this MCP server needs "
                                                "'Authorization: Bearer <token>'")
        assert await refused("tfmcp_not-a-token") == "refused: the bearer token is not one of this server's tokens"
        async with http_client(url, tokens["drones"]) as c:
            r = await c.call_tool("list_robots", {})
            assert [x["id"] for x in r.structured_content["robots"]] == ["tello_1", "tello_2"]
            assert r.structured_content["caller"] == {"name": "drones", "robots": "tello_1, tello_2",
                                                      "urgencies": ["normal"], "operator": False}
            e = error_of(await c.call_tool("send_goal", {"robot_id": "indy_1", "instruction": "clean the desk"}))
            assert e == "robot_id: the token 'drones' may not task robot 'indy_1' (its robots: tello_1, tello_2)"
            e = error_of(await c.call_tool("send_goal", {"robot_id": "chat_9", "instruction": "hi"}))
            assert e == "robot_id: unknown robot 'chat_9' (robots: tello_1, tello_2)"
            e = error_of(await c.call_tool("send_goal", {"robot_id": "tello_1", "instruction": "evade the dog chasing you",
                                                         "urgency": "urgent"}))
            assert e == "urgency: the token 'drones' may not send 'urgent' goals (its urgencies: normal)"
            e = error_of(await c.call_tool("send_goal", {"robot_id": "tello_1", "instruction": "look for the cat",
                                                         "ert_s": 0.1}))
            assert e.startswith("ert_s: the token 'drones' may use only the urgency presets normal"), e
            assert set((await c.call_tool("fleet_status", {})).structured_content["robots"]) == {"tello_1", "tello_2"}
        # a token removed from the file is refused from the next request on
        p = subprocess.run([*TF, "mcp", "token", "add", "temp", "--tokens", str(path)], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
        temp = p.stdout.strip()
        async with http_client(url, temp) as c:
            assert not (await c.call_tool("list_robots", {})).is_error
        p = subprocess.run([*TF, "mcp", "token", "remove", "temp", "--tokens", str(path)], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert await refused(temp) == "refused: the bearer token is not one of this server's tokens"

    anyio.run(main)


def test_http_goal_with_progress_and_cancel_rights_between_tokens(http, fleet):
    url, tokens, _path = http

    async def main() -> None:
        async with http_client(url, tokens["drones"]) as drones, http_client(url, tokens["agent"]) as agent, \
                http_client(url, tokens["ops"]) as ops:
            prog = Progress()
            r = await drones.call_tool("send_goal", {"robot_id": "tello_1", "instruction": "look for the cat"},
                                       progress_callback=prog)
            assert not r.is_error, text(r)
            # the drone may already be at the cat from an earlier goal of this fleet: the result
            # says whether its goto reached it (SUCCEEDED) or not (NOT_ACHIEVED, with the call)
            res = r.structured_content
            assert res["status"] == "SUCCEEDED" or (res["status"] == "NOT_ACHIEVED" and res["reason"] == "not_achieved"
                                                    and res["unachieved"]), res
            assert prog.segments() == list(range(len(r.structured_content["segments"]))), prog.items

            r = await agent.call_tool("send_goal", {"robot_id": "indy_1", "instruction": "clean the desk", "wait": False})
            gid = r.structured_content["goal_id"]
            e = error_of(await drones.call_tool("cancel_goal", {"goal_id": gid}))
            assert e == (f"goal_id: goal {gid[:8]} was sent by another agent ('agent') of this MCP server; only its "
                         "sender or an operator token may cancel it (the planner accepts its cancel only with the "
                         "goal's cancel key)")
            e = error_of(await drones.call_tool("goal_status", {"goal_id": gid}))
            assert e == f"goal_id: goal {gid[:8]} is on robot 'indy_1', which the token 'drones' may not see"
            r = await ops.call_tool("cancel_goal", {"goal_id": gid})
            assert not r.is_error, text(r)
            assert r.structured_content["status"] == "CANCELLED", r.structured_content
            st = (await agent.call_tool("goal_status", {"goal_id": gid})).structured_content
            assert st["state"] == "CANCELLED" and st["sent_by"] == "this MCP server (agent)", st

    anyio.run(main)


def test_http_a_tokens_robots_bound_what_its_missions_may_allocate(http, fleet):
    """The selector a mission goes with is the requested one narrowed to the token's robots: only
    tello_1 can perceive a cat (camera and detector; tello_2 declares no perception), so a token
    limited to tello_2 cannot have the cat found by tello_1."""
    from llm_planner_node.agents_mcp.tokens import add_token

    url, tokens, path = http
    only2 = add_token(path, "tello2only", ("tello_2",), None, False)
    nobody = add_token(path, "nobody", (), None, False)

    async def main() -> None:
        async with http_client(url, only2) as c:
            r = await c.call_tool("send_mission", {"instruction": "look for the cat"})
            assert not r.is_error, text(r)
            res = r.structured_content
            assert res["robots"] == {"ids": ["tello_2"], "kinds": []}, res
            assert res["status"] == "IMPOSSIBLE" and res["tasks"][0]["robot_id"] is None, res
            assert "tello_2 declares nothing it can perceive" in res["message"], res
            # naming a robot outside its list does not reach it either
            r = await c.call_tool("send_mission", {"instruction": "look for the cat", "robots": "tello_1,tello_2"})
            assert r.structured_content["robots"]["ids"] == ["tello_2"], r.structured_content
            assert r.structured_content["status"] == "IMPOSSIBLE", r.structured_content
            e = error_of(await c.call_tool("send_mission", {"instruction": "look for the cat", "robots": "tello_1"}))
            assert e == ("robots: the token 'tello2only' may task none of the robots this mission names (tello_1) "
                         "(its robots: tello_2); the mission was not sent"), e
        async with http_client(url, tokens["drones"]) as c:
            r = await c.call_tool("send_mission", {"instruction": "look for the cat"})
            assert not r.is_error, text(r)
            res = r.structured_content
            assert res["robots"]["ids"] == ["tello_1", "tello_2"] and res["tasks"][0]["robot_id"] == "tello_1", res
            # the drone may already be at the cat from an earlier goal (see the goal test above)
            assert res["tasks"][0]["status"] in ("SUCCEEDED", "NOT_ACHIEVED"), res
            # the desk is the arm's, and the arm is not the token's: no robot of its own can
            r = await c.call_tool("send_mission", {"instruction": "clean the desk"})
            assert r.structured_content["status"] == "IMPOSSIBLE", r.structured_content
            assert r.structured_content["tasks"][0]["robot_id"] is None
            e = error_of(await c.call_tool("send_mission", {"instruction": "clean the desk", "robots": "arm"}))
            assert e == ("robots: the token 'drones' may task none of the robots this mission names (arm) "
                         "(its robots: tello_1, tello_2); the mission was not sent"), e
            e = error_of(await c.call_tool("send_mission", {"instruction": "look for the cat", "urgency": "urgent"}))
            assert e == "urgency: the token 'drones' may not send 'urgent' missions (its urgencies: normal)", e
        async with http_client(url, nobody) as c:
            e = error_of(await c.call_tool("send_mission", {"instruction": "look for the cat"}))
            assert e == "the token 'nobody' may task no robot, so it may send no mission", e

    anyio.run(main)


def test_memory_tells_which_robot_saw_a_thing_and_only_the_tokens_robots(http, fleet):
    """tello_1 found the cat in the first test (scan(cat) -> True): the planner's fleet memory holds
    that sighting; a token limited to tello_2 does not see what tello_1 saw."""
    from llm_planner_node.agents_mcp.tokens import add_token

    url, _tokens, path = http
    only2 = add_token(path, "tello2eyes", ("tello_2",), None, False)

    async def main() -> None:
        async with Client(stdio_server("--params", fleet.params, env=plain_env())) as c:
            r = await c.call_tool("memory", {"label": "cats"})  # by any of its names
            assert not r.is_error, text(r)
            out = r.structured_content
            assert out["label"] == "cats" and out["sightings"], out
            first = out["sightings"][0]
            assert {s["robot_id"] for s in out["sightings"]} >= {"tello_1"} and first["label"] == "cat", out
            assert first["age_s"] >= 0 and first["time_utc"].endswith("+00:00") and len(first["goal_id"]) in (0, 32)
            r = await c.call_tool("memory", {"label": "cat", "max_results": 1})
            assert len(r.structured_content["sightings"]) == 1
            e = error_of(await c.call_tool("memory", {"label": ""}))
            assert e.startswith("label: String should have at least 1 character"), e
            e = error_of(await c.call_tool("memory", {"label": "cat", "max_results": 0}))
            assert e.startswith("max_results: Input should be greater than or equal to 1"), e
        async with http_client(url, only2) as c:
            r = await c.call_tool("memory", {"label": "cat"})
            assert not r.is_error, text(r)
            out = r.structured_content
            assert all(s["robot_id"] == "tello_2" for s in out["sightings"]), out
            if not out["sightings"]:
                assert out["message"] == "nothing remembered about \"cat\" by the robots the token 'tello2eyes' may task"

    anyio.run(main)


# -- a swarm: 50 simulated drones (and one whose every segment waits for an operator) ----------------
SWARM, SESSIONS = 50, 5
DRONE_TASKS = ("look for the cat", "check for keys or wallets", "check the book on the cabinet",
               "find a toy under the bed", "find a tool for cutting paper")


@pytest.fixture(scope="module")
def swarm(tmp_path_factory):
    """`timely-fleet up --engine sim` with 50 simulated drones and `guarded` (approval of every
    segment) in namespace /swarm at time scale 0.02, and `timely-fleet mcp --http` for it with a
    token per agent session (each limited to its ten drones) and `lead` (every robot)."""
    from llm_planner_node.agents_mcp.tokens import add_token

    tmp = tmp_path_factory.mktemp("mcp_swarm")
    robots = [{"id": f"drone_{i:02d}", "kind": "drone", "skill_set": "tello_minispec", "adapter": "sim"}
              for i in range(SWARM)]
    robots.append({"id": "guarded", "kind": "drone", "adapter": "sim", "approval": {"all": True, "timeout_s": 60}})
    params = tmp / "swarm.yaml"
    params.write_text(yaml.safe_dump({"planner": {"policy": "timelyllm", "engine": {"kind": "sim"}},
                                      "security": {"mode": "sign", "keystore": str(tmp / "keys")},
                                      "robots": robots}))
    u = up("--params", str(params), "--engine", "sim", "--time-scale", "0.02", "--namespace", "swarm")
    tokens = tmp / "tokens.yaml"
    made = {f"agent{k}": add_token(tokens, f"agent{k}", tuple(f"drone_{i:02d}" for i in range(k * 10, k * 10 + 10)),
                                   None, False) for k in range(SESSIONS)}
    made["lead"] = add_token(tokens, "lead", None, None, False)
    proc, url = mcp_http("--params", str(params), "--namespace", "swarm", "--tokens", str(tokens), env=plain_env())
    yield url, made
    for name, p in (("mcp", proc), ("up", u)):
        log = p.stop()
        assert "Traceback" not in log, f"{name}:\n{log[-3000:]}"


def test_http_fifty_concurrent_goals_from_five_agent_sessions_none_lost(swarm):
    url, tokens = swarm
    results: dict[str, object] = {}
    progress: dict[str, Progress] = {}

    async def agent(k: int) -> None:
        async with http_client(url, tokens[f"agent{k}"]) as c:
            async def one(robot: str, instruction: str) -> None:
                progress[robot] = Progress()
                results[robot] = await c.call_tool("send_goal", {"robot_id": robot, "instruction": instruction,
                                                                 "timeout_s": 120}, progress_callback=progress[robot])

            async with anyio.create_task_group() as tg:
                for i in range(k * 10, k * 10 + 10):
                    tg.start_soon(one, f"drone_{i:02d}", DRONE_TASKS[i % len(DRONE_TASKS)])

    async def main() -> None:
        with anyio.fail_after(150):
            async with anyio.create_task_group() as tg:
                for k in range(SESSIONS):
                    tg.start_soon(agent, k)

    t0 = time.monotonic()
    anyio.run(main)
    elapsed = time.monotonic() - t0
    assert sorted(results) == [f"drone_{i:02d}" for i in range(SWARM)]  # every call returned
    errors = {r: text(res) for r, res in results.items() if res.is_error}
    assert not errors, errors
    out = {r: res.structured_content for r, res in results.items()}
    assert {r: o["status"] for r, o in out.items()} == {r: "SUCCEEDED" for r in out}, \
        {r: o.get("message") for r, o in out.items() if o["status"] != "SUCCEEDED"}
    assert len({o["goal_id"] for o in out.values()}) == SWARM  # 0 lost, none answered twice
    for r, o in out.items():
        i = int(r.split("_")[1])
        assert o["robot_id"] == r and o["instruction"] == DRONE_TASKS[i % len(DRONE_TASKS)]
        assert o["plan_text"] and o["segments"], o
        assert progress[r].segments() == list(range(len(o["segments"]))), (r, progress[r].items)
    print(f"\n50 send_goal calls from {SESSIONS} MCP sessions: all SUCCEEDED in {elapsed:.1f} s; response time "
          f"max {max(o['response_time_s'] for o in out.values()):.2f} s")


def test_a_segment_held_for_approval_is_the_goals_state(swarm):
    url, tokens = swarm

    async def main() -> None:
        async with http_client(url, tokens["lead"]) as c:
            prog, box = Progress(), {}

            async def send() -> None:
                box["r"] = await c.call_tool("send_goal", {"robot_id": "guarded", "instruction": "look for the cat"},
                                             progress_callback=prog)

            async with anyio.create_task_group() as tg:
                tg.start_soon(send)
                with anyio.fail_after(30):
                    while True:  # the goal as list_robots shows it, then as goal_status does
                        r = await c.call_tool("list_robots", {})
                        guarded = next(x for x in r.structured_content["robots"] if x["id"] == "guarded")
                        state = guarded.get("current_goal", {}).get("state", "")
                        if state.startswith("waiting for approval"):
                            break
                        await anyio.sleep(0.1)
                gid = guarded["current_goal"]["goal_id"]
                st = await goal_state(c, gid)
                assert re.match(r"waiting for approval of segment 0: ", st["state"]), st
                assert st["segments"] == [], st
                r = await c.call_tool("cancel_goal", {"goal_id": gid})
                assert not r.is_error, text(r)
                assert r.structured_content["status"] == "CANCELLED", r.structured_content
            res = box["r"]
            assert not res.is_error, text(res)
            assert res.structured_content["status"] == "CANCELLED" and res.structured_content["goal_id"] == gid
            assert any((m or "").startswith("guarded: waiting for approval of segment 0: ") for _p, _t, m in prog.items), \
                prog.items

    anyio.run(main)
