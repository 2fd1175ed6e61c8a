"""`timely-fleet bench missions`: fleet instructions held apart from training, given to the
default fleet as missions over ROS; who was chosen, what ended, how long it took.

What runs (bounded: each mission at most ``--mission-timeout-s``, every child stopped in
``finally``):

- the default fleet (``config/fleet.yaml``: a camera drone, a drone whose perception is not
  declared, an arm with its workspace, a chat robot, a Nav2 base with places and a detector) with
  its robots' ids replaced by random ones and listed in a random order (``--seed``), so that
  nothing can allocate by a memorised id or by the order of the YAML; the instructions' exact
  ``robots`` are renamed the same way;
- ``timely-fleet up --params`` that fleet (the real planner model unless ``--engine sim``), and
  in this process a plain rclpy ``PlanMission`` client and a ``planner/results`` subscriber;
- the missions one after the other (``--instructions PATH``, default the held-out set beside this
  file), then the fault phase (``--faults K``, default 2): a fleet of K + 1 protocol-simulated
  drones (``tello-sim``) of which the first K are listed first and run flat in flight
  (``battery_pct`` 24, ``battery_drain_per_s`` 4: each lands by itself, its motion failing, a few
  seconds after take-off), and one mission for a drone ("look for the cat", which the simulated
  engine plans too; no cat is there): every robot that fails under it is a fault, re-allocated
  when the mission's next event moves the task to another robot.

``--instructions PATH`` takes one mission a line: ``{"instruction": "...", "kinds": ["arm",
"drone"], "robots": ["tello_1"], "impossible": false}``: ``kinds``, the sorted kinds of the
robots the mission must use (one entry per robot); ``robots``, optional exact ids it must use
(sent as the mission's robot selector, the user having named them); ``impossible``: no robot of
the fleet can do it.

What is measured (JSON ``--json PATH``):

- ``valid_plans``: of the tasks that reached a robot, the share whose goal wrote plans and did not
  end INVALID_PLAN;
- ``allocation_correct``: of all missions, the share whose robots (the robot that ran each task
  last) have exactly the sorted ``kinds`` and include every id of ``robots``; an impossible
  mission's allocation is correct when no task reached a robot;
- ``succeeded``: of the possible missions, the share that ended SUCCEEDED;
- ``impossible_refused``: of the impossible missions, the share that ended IMPOSSIBLE or REJECTED
  with a reason (a message), no task having reached a robot;
- ``reallocated_after_fault``: ``{"faults", "reallocated"}`` of the fault phase;
- ``mission_s_median``: send to result; ``first_task_response_s_median``: send to the first
  task's first segment at its robot (its goal's allocation, as this client heard it, plus the
  goal's ``response_time_s``);
- ``vs_per_goal``: mission-aware against per-goal scheduling of concurrent missions on one engine
  (``load``, both utilities, ``ratio``): ``null`` while every mission is one task, scheduled as
  its one goal, so that the two are the same schedule (``why`` says so);
- ``by_mission``: each mission's instruction, expected kinds, status, robots and kinds used, its
  tasks' statuses, and the times.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import string
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from timely_tools import outfiles
from timely_tools.bench.faults_bench import CLI, in_workdir
from timely_tools.bench.procs import start_process, stop_process

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_FLEET = ROOT / "config" / "fleet.yaml"
DEFAULT_INSTRUCTIONS = Path(__file__).with_name("missions_heldout.jsonl")
#: PlanMission result status and PlanTask result status codes used here
MISSION_SUCCEEDED, MISSION_IMPOSSIBLE, MISSION_REJECTED = 0, 2, 4
TASK_INVALID_PLAN = 3
MISSION_NAMES = {0: "SUCCEEDED", 1: "FAILED", 2: "IMPOSSIBLE", 3: "UNAVAILABLE", 4: "REJECTED", 5: "CANCELLED"}
#: the fault phase's flat drones: charge at start and drain in flight (% and %/s)
FAULT_BATTERY_PCT, FAULT_DRAIN_PER_S = 24, 4.0
FAULT_INSTRUCTION = "look for the cat"  # plans on every engine; the flat drone fails in flight


def log(text: str) -> None:
    print(f"[missions] {text}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class MissionCase:
    """One line of an instructions file."""

    instruction: str
    kinds: tuple[str, ...]
    robots: tuple[str, ...] = ()
    impossible: bool = False


def load_cases(path: Path) -> list[MissionCase]:
    """The missions of a JSON-lines file; a bad line is a ValueError naming it."""
    cases = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            if not isinstance(d, dict) or not isinstance(d.get("instruction"), str) or not d["instruction"].strip():
                raise ValueError("needs a non-empty 'instruction'")
            kinds = d.get("kinds", [])
            robots = d.get("robots", [])
            if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
                raise ValueError("'kinds' must be a list of robot kinds")
            if not isinstance(robots, list) or not all(isinstance(r, str) for r in robots):
                raise ValueError("'robots' must be a list of robot ids")
            impossible = d.get("impossible", False)
            if not isinstance(impossible, bool):
                raise ValueError("'impossible' must be true or false")
            if impossible and kinds:
                raise ValueError("an impossible mission uses no robot: 'kinds' must be empty")
            if not impossible and not kinds:
                raise ValueError("a possible mission names the kinds of the robots it must use")
        except ValueError as e:
            raise ValueError(f"{path} line {n}: {e}") from None
        cases.append(MissionCase(d["instruction"], tuple(sorted(kinds)), tuple(robots), impossible))
    if not cases:
        raise ValueError(f"{path} holds no mission")
    return cases


def randomised_fleet(params: dict[str, Any], rng: random.Random) -> tuple[dict[str, Any], dict[str, str]]:
    """``params`` with every robot renamed ``<kind>_<4 random letters>`` and the robots in a random
    order; (new params, old id -> new id). Topics that name a robot's id follow its new id."""
    out = json.loads(json.dumps(params))
    robots = out["robots"]
    ids: dict[str, str] = {}
    for r in robots:
        new = f"{r['kind']}_{''.join(rng.choice(string.ascii_lowercase) for _ in range(4))}"
        while new in ids.values():
            new += rng.choice(string.ascii_lowercase)
        ids[r["id"]] = new
    for r in robots:
        old = r["id"]
        r["id"] = ids[old]
        perception = r.get("perception")
        if isinstance(perception, dict) and isinstance(perception.get("topic"), str):
            perception["topic"] = perception["topic"].replace(old, ids[old])
    rng.shuffle(robots)
    return out, ids


def renamed(case: MissionCase, ids: dict[str, str]) -> MissionCase:
    """The case with its robot ids (in ``robots`` and in the instruction's words) renamed."""
    text = case.instruction
    for old, new in ids.items():
        text = re.sub(rf"\b{re.escape(old)}\b", new, text)
    return MissionCase(text, case.kinds, tuple(ids.get(r, r) for r in case.robots), case.impossible)


def fault_fleet(params: dict[str, Any], faults: int) -> dict[str, Any]:
    """The fault phase's fleet: ``faults`` flat protocol-simulated drones listed first, then one
    with a full charge (the default fleet's planner and security sections)."""
    out = {k: v for k, v in params.items() if k != "robots"}
    fence = {"fence_cm": [-500, 500, -500, 500, -200, 300]}
    robots = [{"id": f"drone_flat{i}", "kind": "drone", "skill_set": "tello_minispec", "adapter": "tello-sim",
               "budget": fence, "simulator": {"battery_pct": FAULT_BATTERY_PCT, "battery_drain_per_s": FAULT_DRAIN_PER_S}}
              for i in range(faults)]
    robots.append({"id": "drone_full", "kind": "drone", "skill_set": "tello_minispec", "adapter": "tello-sim",
                   "budget": fence})
    out["robots"] = robots
    return out


# -- one mission's outcome, and the figures --------------------------------------------------------
@dataclass
class MissionOutcome:
    """What the client saw of one mission."""

    status: int | None                 # PlanMission result status; None: no result in time
    message: str
    tasks: list[dict[str, Any]]        # per task: robot_id, status, plans, goal_id
    events: list[tuple[float, str, str, str]]  # (s after send, event, robot, text)
    mission_s: float | None
    first_task_response_s: float | None


def robots_used(o: MissionOutcome) -> list[str]:
    return [t["robot_id"] for t in o.tasks if t["robot_id"]]


def allocation_correct(case: MissionCase, o: MissionOutcome, kind_of: dict[str, str]) -> bool:
    """The mission's robots have exactly the case's sorted kinds and every id it names; an
    impossible mission's when no task reached a robot."""
    used = robots_used(o)
    if case.impossible:
        return not used
    return tuple(sorted(kind_of.get(r, "?") for r in used)) == case.kinds and set(case.robots) <= set(used)


def figures(cases: list[MissionCase], outcomes: list[MissionOutcome], kind_of: dict[str, str],
            faults: dict[str, int]) -> dict[str, Any]:
    """The bench's figures (module docstring) from the missions' outcomes."""
    tasks = [t for o in outcomes for t in o.tasks if t["robot_id"]]
    valid = [t for t in tasks if t["plans"] and t["status"] != TASK_INVALID_PLAN]
    possible = [(c, o) for c, o in zip(cases, outcomes) if not c.impossible]
    impossible = [(c, o) for c, o in zip(cases, outcomes) if c.impossible]

    def share(k: int, n: int) -> float | None:
        return round(k / n, 3) if n else None

    def median(xs: list[float | None]) -> float | None:
        v = [x for x in xs if x is not None]
        return round(statistics.median(v), 2) if v else None

    return {
        "missions": len(cases),
        "valid_plans": share(len(valid), len(tasks)),
        "allocation_correct": share(sum(allocation_correct(c, o, kind_of) for c, o in zip(cases, outcomes)), len(cases)),
        "succeeded": share(sum(o.status == MISSION_SUCCEEDED for _, o in possible), len(possible)),
        "impossible_refused": share(sum(o.status in (MISSION_IMPOSSIBLE, MISSION_REJECTED) and bool(o.message.strip())
                                        and not robots_used(o) for _, o in impossible), len(impossible)),
        "reallocated_after_fault": faults,
        "mission_s_median": median([o.mission_s for o in outcomes]),
        "first_task_response_s_median": median([o.first_task_response_s for o in outcomes]),
        "vs_per_goal": {"load": None, "mission_utility": None, "per_goal_utility": None, "ratio": None,
                        "why": "every mission is one task, scheduled as its one goal: mission-aware and per-goal "
                               "scheduling are the same schedule"},
    }


def faults_of(o: MissionOutcome, flat: set[str]) -> dict[str, int]:
    """Faults in a fault-phase mission: robots of ``flat`` that ended the task otherwise than by
    success; re-allocated: those after which the task moved to another robot."""
    failed = [(i, robot) for i, (_t, ev, robot, _x) in enumerate(o.events) if ev in ("ended", "refused")
              and robot in flat and _x != "succeeded"]
    moved = sum(1 for i, robot in failed if any(ev == "moved" and r == robot for _t, ev, r, _x in o.events[i + 1:]))
    return {"faults": len(failed), "reallocated": moved}


# -- over ROS ---------------------------------------------------------------------------------------
class MissionClient:
    """A plain rclpy ``PlanMission`` client and a ``planner/results`` subscriber on one node."""

    def __init__(self) -> None:
        import rclpy
        from rclpy.action import ActionClient
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.node import Node
        from timely_fleet.action import PlanMission
        from timely_fleet.msg import GoalResult

        from llm_planner_node.ros.messages import RESULTS_TOPIC, action_qos_kwargs
        from llm_planner_node.ros.mission_server import MISSION_ACTION
        from timely_robot.link.ros import STATUS_QOS

        self._PlanMission = PlanMission
        self.ctx = Context()
        rclpy.init(context=self.ctx)
        self.node = Node("missions_bench_client", context=self.ctx)
        self.client = ActionClient(self.node, PlanMission, MISSION_ACTION, **action_qos_kwargs("client"))
        self.responses: dict[str, float] = {}  # goal id -> response_time_s
        self.node.create_subscription(GoalResult, RESULTS_TOPIC, self._on_result, STATUS_QOS)
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(self.node)
        self._stop = threading.Event()
        self._spin = threading.Thread(target=self._spinner, daemon=True)
        self._spin.start()

    def _spinner(self) -> None:
        while not self._stop.is_set():
            self.ex.spin_once(timeout_sec=0.05)

    def _on_result(self, m: Any) -> None:
        self.responses[m.goal_id] = float(m.response_time_s)

    def wait_for_server(self, timeout_s: float) -> bool:
        return self.client.wait_for_server(timeout_sec=timeout_s)

    def run(self, case: MissionCase, timeout_s: float) -> MissionOutcome:
        goal = self._PlanMission.Goal()
        goal.instruction = case.instruction
        goal.robot_ids = list(case.robots)
        goal.ert_s, goal.alpha, goal.beta = 1.0, -2.0, 1.0
        events: list[tuple[float, str, str, str]] = []
        allocated_at: dict[str, float] = {}
        t0 = time.monotonic()

        def on_feedback(fb: Any) -> None:
            f = fb.feedback
            t = time.monotonic() - t0
            events.append((t, f.event, f.robot_id, f.text))
            if f.event == "allocated" and f.goal_id:
                allocated_at.setdefault(f.goal_id, t)

        done = threading.Event()
        box: dict[str, Any] = {}

        def on_goal(fut: Any) -> None:
            handle = fut.result()
            if not handle.accepted:
                box["result"] = None
                done.set()
                return
            handle.get_result_async().add_done_callback(lambda rf: (box.update(result=rf.result().result), done.set()))

        self.client.send_goal_async(goal, feedback_callback=on_feedback).add_done_callback(on_goal)
        if not done.wait(timeout_s) or box.get("result") is None:
            return MissionOutcome(None, "no result in time" if not done.is_set() else "not accepted", [], events, None, None)
        res = box["result"]
        mission_s = time.monotonic() - t0
        tasks = [{"task": t.task, "robot_id": t.robot_id, "goal_id": t.goal_id, "status": int(t.status),
                  "message": t.message, "plans": list(t.plans), "tried": list(t.tried_robots)} for t in res.tasks]
        first = None
        deadline = time.monotonic() + 2.0  # the goal's result on planner/results may follow the mission's
        for t in tasks:
            gid = t["goal_id"]
            while gid and gid in allocated_at and gid not in self.responses and time.monotonic() < deadline:
                time.sleep(0.05)
            if gid in allocated_at and gid in self.responses:
                r = allocated_at[gid] + self.responses[gid]
                first = r if first is None else min(first, r)
        return MissionOutcome(int(res.status), res.message, tasks, events, round(mission_s, 3),
                              None if first is None else round(first, 3))

    def close(self) -> None:
        self._stop.set()
        self._spin.join(timeout=2)
        self.node.destroy_node()
        self.ctx.try_shutdown()


def run_fleet(params: dict[str, Any], cases: list[MissionCase], tmp: Path, tag: str, cfg: argparse.Namespace,
              ) -> list[MissionOutcome]:
    """``up`` the fleet, run the missions one after the other, stop it."""
    path = tmp / f"fleet_{tag}.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    up = [*CLI, "up", "--params", str(path)]
    if cfg.engine == "sim":
        up += ["--engine", "sim"]
    proc = start_process(up, tmp / f"up_{tag}.log")
    client = None
    out: list[MissionOutcome] = []
    try:
        client = MissionClient()
        t = time.monotonic()
        if not client.wait_for_server(cfg.startup_timeout_s):
            raise RuntimeError(f"no plan_mission server within {cfg.startup_timeout_s:.0f} s; see {tmp}/up_{tag}.log")
        log(f"{tag}: planner up in {time.monotonic() - t:.0f} s; {len(cases)} mission(s)")
        time.sleep(cfg.settle_s)  # the robots' first statuses (battery, link) reach the allocator
        for i, case in enumerate(cases, 1):
            o = client.run(case, cfg.mission_timeout_s)
            used = ", ".join(robots_used(o)) or "-"
            log(f"{tag} {i}/{len(cases)}: {MISSION_NAMES.get(o.status, 'NO RESULT')} on {used} in "
                f"{o.mission_s if o.mission_s is not None else '-'} s: {case.instruction[:60]}")
            out.append(o)
    finally:
        if client is not None:
            client.close()
        stop_process(proc)
    return out


def run_bench(cfg: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    base = yaml.safe_load(Path(cfg.fleet).read_text())
    cases = load_cases(Path(cfg.instructions))
    rng = random.Random(cfg.seed)
    params, ids = randomised_fleet(base, rng)
    sent = [renamed(c, ids) for c in cases]
    kind_of = {r["id"]: r["kind"] for r in params["robots"]}
    outcomes = run_fleet(params, sent, tmp, "missions", cfg)
    faults = {"faults": 0, "reallocated": 0}
    if cfg.faults > 0:
        flat = {f"drone_flat{i}" for i in range(cfg.faults)}
        [fo] = run_fleet(fault_fleet(base, cfg.faults), [MissionCase(FAULT_INSTRUCTION, ("drone",))], tmp, "faults", cfg)
        faults = faults_of(fo, flat)
        faults["mission_status"] = MISSION_NAMES.get(fo.status, "NO RESULT")  # type: ignore[assignment]
        faults["robots"] = [t for _t, ev, t, _x in fo.events if ev == "allocated"]  # type: ignore[assignment]
        faults["message"] = fo.message[:300]  # type: ignore[assignment]
        faults["events"] = [f"{ev} {robot}: {text}"[:200] for _t, ev, robot, text in fo.events]  # type: ignore[assignment]
    r = figures(sent, outcomes, kind_of, faults)
    r["config"] = {"instructions": str(cfg.instructions), "fleet": str(cfg.fleet), "seed": cfg.seed,
                   "engine": cfg.engine, "faults": cfg.faults, "robot_ids": ids}
    r["by_mission"] = [{"instruction": c.instruction, "kinds": list(c.kinds), "robots": list(c.robots),
                        "impossible": c.impossible, "status": MISSION_NAMES.get(o.status, "NO RESULT"),
                        "message": o.message[:300], "robots_used": robots_used(o),
                        "kinds_used": sorted(kind_of.get(x, "?") for x in robots_used(o)),
                        "allocation_correct": allocation_correct(c, o, kind_of),
                        "tasks": [{"robot_id": t["robot_id"], "status": t["status"], "plans": t["plans"]} for t in o.tasks],
                        "mission_s": o.mission_s, "first_task_response_s": o.first_task_response_s}
                       for c, o in zip(sent, outcomes)]
    return r


def print_summary(r: dict[str, Any]) -> None:
    def pc(x: float | None) -> str:
        return "-" if x is None else f"{100 * x:.0f}%"

    f = r["reallocated_after_fault"]
    print(f"missions {r['missions']}: valid plans {pc(r['valid_plans'])}, allocation correct "
          f"{pc(r['allocation_correct'])}, succeeded {pc(r['succeeded'])} of the possible, impossible refused "
          f"{pc(r['impossible_refused'])}; faults {f['faults']}, re-allocated {f['reallocated']}; "
          f"mission {r['mission_s_median']} s, first task's response {r['first_task_response_s_median']} s (medians)")
    for m in r["by_mission"]:
        mark = "ok " if m["allocation_correct"] else "BAD"
        print(f"  {mark} {m['status']:<11} want {','.join(m['kinds']) or '-':<22} got "
              f"{','.join(m['kinds_used']) or '-':<22} {m['instruction'][:70]}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--instructions", default=str(DEFAULT_INSTRUCTIONS),
                        help="one mission a line (JSON: instruction, kinds, robots, impossible; default: the held-out set)")
    parser.add_argument("--fleet", default=str(DEFAULT_FLEET), help="the fleet the ids are drawn from (default: %(default)s)")
    parser.add_argument("--engine", choices=("default", "sim"), default="default",
                        help="default: the fleet's engine (the real planner model); sim: the simulated engine")
    parser.add_argument("--seed", type=int, default=0, help="robot ids and YAML order (default: %(default)s)")
    parser.add_argument("--faults", type=int, default=2, help="flat drones in the fault phase (0: none; default: %(default)s)")
    parser.add_argument("--mission-timeout-s", type=float, default=180.0, help="per mission (default: %(default)s)")
    parser.add_argument("--startup-timeout-s", type=float, default=300.0, help="for the planner to come up (default: %(default)s)")
    parser.add_argument("--settle-s", type=float, default=3.0, help="after start-up, before the first mission (default: %(default)s)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")


def run(args: argparse.Namespace) -> int:
    if args.faults < 0 or args.faults > 2:
        print("timely-fleet bench missions: --faults is 0, 1 or 2 (a task moves at most planner.max_reallocations "
              "= 2 times)", file=sys.stderr)
        return 2
    try:
        load_cases(Path(args.instructions))
    except (OSError, ValueError) as e:
        print(f"timely-fleet bench missions: {e}", file=sys.stderr)
        return 2
    r = in_workdir("missions_bench_", lambda workdir: run_bench(args, workdir))
    print_summary(r)
    if args.json:
        outfiles.write_json(args.json, r, indent=2)
    return 0
