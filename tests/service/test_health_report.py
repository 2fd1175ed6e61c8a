"""The planner's /diagnostics statuses without ROS (llm_planner_node/service/health_report.py):
levels and messages for the engine, the goals, the robots and the operator, each reported once
where a failure is news; the node's DiagnosticArray over ROS is in tests/ros/test_ros_native.py."""

from __future__ import annotations

from types import SimpleNamespace

from llm_planner_node.service.diagnostics import Snapshot
from llm_planner_node.service.health_report import ERROR, OK, QUEUE_WARN, WARN, HealthReport


def service(**snap):
    health = SimpleNamespace(state="up", failures=0, failures_reported=0, last_error="")
    params = SimpleNamespace(planner=SimpleNamespace(engine=SimpleNamespace(kind="vllm")),
                             robots=[1, 2], security=SimpleNamespace(mode="sign"))
    return SimpleNamespace(snapshot=Snapshot(**snap), health=health, params=params, accepting=True,
                           operator_view=lambda: ([], {}, []))


def test_an_engine_failure_is_an_error_once_and_the_next_report_is_ok_again():
    h, svc = HealthReport("p"), service(tokens_per_s=42.0)
    assert (h.engine(svc).level, h.engine(svc).message) == (OK, "engine up (vllm, 42 tokens/s)")
    svc.health.failures, svc.health.last_error = 1, "CUDA out of memory"
    rep = h.engine(svc)
    assert rep.level == ERROR and rep.message == "engine failed and was restarted: CUDA out of memory"
    assert h.engine(svc).level == OK
    svc.health.state = "restarting"
    assert h.engine(svc).message == "engine restarting: CUDA out of memory"


def test_a_nearly_full_kv_cache_warns_and_a_long_queue_warns():
    h = HealthReport("p")
    assert h.engine(service(kv_free_fraction=0.04)).level == WARN
    assert h.engine(service(kv_free_fraction=0.05)).level == OK
    rep = h.goals(service(queued=QUEUE_WARN + 1), {"not the goal's client": 2}, 1)
    assert rep.level == WARN and rep.message == f"queue of {QUEUE_WARN + 1} past {QUEUE_WARN}"
    assert ("cancel refused: not the goal's client", "2") in rep.values
    assert ("cancel refused: cancel all", "1") in rep.values
    assert h.goals(service(queued=QUEUE_WARN, active_goals=3), {}, 0).message == "3 goal(s) in flight, accepting"


def test_statuses_that_failed_authentication_warn_once_for_each_new_batch():
    h, svc = HealthReport("p"), service()
    assert h.robots(svc, {"accepted": 10}).message == "2 robot(s) reporting"
    rep = h.robots(svc, {"accepted": 10, "unsigned": 3, "replayed": 1})
    assert rep.level == WARN and rep.message.startswith("4 status(es) failed authentication")
    assert h.robots(svc, {"accepted": 11, "unsigned": 3, "replayed": 1}).level == OK
    assert h.robots(service(silent_robots=("d1",)), {}).message == "silent: d1"


def test_goals_waiting_for_an_operator_warn_and_name_the_segment():
    svc = service()
    svc.operator_view = lambda: ([("ab" * 16, "d1", 2, 31.0)], {"approvals": 1}, ["approved x"])
    (rep,) = HealthReport("p").operator(svc)
    assert rep.level == WARN and rep.message == "1 goal(s) waiting for approval: d1 segment 2 of goal abababab for 31 s"
    assert rep.values == [("approvals", "1"), ("event 1", "approved x")]
