"""The allocator (llm_planner_node/service/allocation.py): a robot is chosen only if its declarations
cover the task and it is free now; parallel tasks are assigned jointly (as many served as
possible, then the least total expected completion), checked by hand and against brute force."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from llm_planner_node.service.allocation import (
    BATTERY_RESERVE_PCT, RobotOffer, TaskNeed, allocate, incapable, travel_s, unavailable)

DRONE_SKILLS = frozenset({"scan", "goto", "take_picture", "land"})
ARM_SKILLS = frozenset({"look", "pick", "place"})
BASE_SKILLS = frozenset({"go_to", "scan", "is_visible"})
COCO = frozenset({"person", "cat", "dog", "cup", "cell_phone"})


def drone(rid: str, expected_s: float = 5.0, **kw) -> RobotOffer:
    return RobotOffer(rid, "drone", DRONE_SKILLS, kw.pop("perceivable", COCO), expected_s=expected_s,
                      battery_pct=kw.pop("battery_pct", 80.0), **kw)


def test_find_the_cat_goes_to_a_camera_drone_never_to_the_arm_or_a_robot_of_unknown_perception():
    fleet = [RobotOffer("arm_1", "arm", ARM_SKILLS, frozenset({"apple", "cup"}), frozenset({"apple", "cup"}),
                        expected_s=1.0),
             drone("sim_1", expected_s=0.5, perceivable=None),  # adapter: sim, refuses nothing: unknown
             drone("tello_1", expected_s=4.0)]
    need = TaskNeed("t1", skills=("scan",), perceive=("cat",))
    [choice] = allocate([need], fleet)
    assert choice.robot_id == "tello_1" and choice.expected_s == 4.0
    assert choice.why == "tello_1 (drone): able and free, expected done in 4.0 s (the only robot able)"
    assert choice.refused == {"arm_1": "has no skill scan", "sim_1": "declares nothing it can perceive"}


def test_each_declaration_refuses_with_one_sentence():
    base = RobotOffer("base_1", "base", BASE_SKILLS, frozenset({"person", "box"}), places=frozenset({"kitchen", "lab"}))
    assert incapable(TaskNeed("t", kinds=("drone",)), base) == "a base, the task needs a drone"
    assert incapable(TaskNeed("t", robot_ids=("tello_1",)), base) == "not among the robots named (tello_1)"
    assert incapable(TaskNeed("t", perceive=("Cat",)), base) == "cannot perceive 'Cat'"
    assert incapable(TaskNeed("t", places=("Living room",)), base) == "knows no place 'Living room'"
    assert incapable(TaskNeed("t", objects=("apple",)), base) == "has no 'apple' in its workspace"
    assert incapable(TaskNeed("t", kinds=("base",), skills=("go_to",), perceive=("box",), places=("Lab",)), base) is None
    assert incapable(TaskNeed("t", perceive=("cell phone",)), drone("d")) is None  # names as declarations spell them


def test_availability_busy_reserved_link_and_battery():
    need = TaskNeed("t", battery_pct=25.0)
    assert unavailable(need, drone("d", busy_with="goal 3f2a")) == "busy with goal 3f2a"
    assert unavailable(need, drone("d", busy_with="mission m1"), mission="mission m1") is None  # reserved for it
    assert unavailable(need, drone("d", link_age_s=None)) is None  # not measured: its goal's silence timeout watches it
    assert unavailable(need, drone("d", link_age_s=4.2)) == "unheard for 4.2 s"
    low = 25.0 + BATTERY_RESERVE_PCT - 1
    assert unavailable(need, drone("d", battery_pct=low)) == "battery 34% < the 25% the task needs + 10% reserve"
    assert unavailable(need, drone("d", battery_pct=low + 1)) is None
    arm = RobotOffer("arm_1", "arm", ARM_SKILLS, None)  # no battery to mind
    assert unavailable(need, arm) is None


def test_joint_assignment_leaves_the_fast_drone_to_the_task_only_it_can_do():
    # greedy, task by task: t1 takes tello_1 (2 s, the fastest) and t2 (only tello_1 sees a dog) gets none
    fleet = [drone("tello_1", 2.0), drone("tello_2", 5.0, perceivable=frozenset({"cat"}))]
    needs = [TaskNeed("t1", perceive=("cat",)), TaskNeed("t2", perceive=("dog",))]
    t1, t2 = allocate(needs, fleet)
    assert (t1.robot_id, t2.robot_id) == ("tello_2", "tello_1")
    assert t1.why.endswith("(2 robots were able)") and t2.refused == {"tello_2": "cannot perceive 'dog'"}


def test_the_least_total_expected_completion_by_hand():
    # expected completion (s), task x robot: the minimum is t1->r2 + t2->r3 + t3->r1 = 2 + 1 + 3 = 6
    # (greedy by rows: t1->r1 4, t2->r3 1, t3->r2 5 = 10)
    table = {("t1", "r1"): 4.0, ("t1", "r2"): 2.0, ("t1", "r3"): 8.0,
             ("t2", "r1"): 4.0, ("t2", "r2"): 3.0, ("t2", "r3"): 1.0,
             ("t3", "r1"): 3.0, ("t3", "r2"): 5.0, ("t3", "r3"): 9.0}
    fleet = [drone(r) for r in ("r1", "r2", "r3")]
    choices = allocate([TaskNeed(t) for t in ("t1", "t2", "t3")], fleet,
                       expected=lambda n, r: table[(n.task, r.robot_id)])
    assert [(c.task, c.robot_id, c.expected_s) for c in choices] == [("t1", "r2", 2.0), ("t2", "r3", 1.0),
                                                                      ("t3", "r1", 3.0)]


def test_a_robot_with_the_shorter_queue_but_twenty_metres_away_loses_to_a_nearer_one():
    # the box was last seen at (20, 0, 0); bases drive 0.25 m/s. base_far: 10 s of queue and
    # execution + 20 m / 0.25 = 90 s; base_near, 2 m from it: 30 s + 2 m / 0.25 = 38 s
    box = TaskNeed("t1", perceive=("box",), near=(20.0, 0.0, 0.0))
    far = RobotOffer("base_far", "base", BASE_SKILLS, frozenset({"box"}), expected_s=10.0, position=(0.0, 0.0, 0.0))
    near = RobotOffer("base_near", "base", BASE_SKILLS, frozenset({"box"}), expected_s=30.0,
                      position=(20.0, 2.0, 0.0))
    [c] = allocate([box], [far, near])
    assert (c.robot_id, c.expected_s) == ("base_near", pytest.approx(38.0))
    assert c.why == "base_near (base): able and free, expected done in 38.0 s, 2.0 m away (2 robots were able)"
    assert travel_s(box, far) == pytest.approx(80.0)
    # a drone flies 0.6 m/s (the Tello's effective speed): 20 m is 33.3 s; an arm does not travel
    assert travel_s(box, drone("d", position=(0.0, 0.0, 0.0))) == pytest.approx(20.0 / 0.6)
    assert travel_s(box, RobotOffer("arm_1", "arm", ARM_SKILLS, None, position=(0.0, 0.0, 0.0))) == 0.0
    # where the box is not known, or where a robot is not, there is no travel term: the queue decides
    [c] = allocate([TaskNeed("t1", perceive=("box",))], [far, near])
    assert c.robot_id == "base_far"
    unplaced = RobotOffer("base_far", "base", BASE_SKILLS, frozenset({"box"}), expected_s=10.0)
    [c] = allocate([box], [unplaced, near])
    assert (c.robot_id, c.expected_s) == ("base_far", 10.0)


def test_a_task_without_a_robot_says_why():
    fleet = [drone("tello_1", busy_with="goal 9"), RobotOffer("arm_1", "arm", ARM_SKILLS, frozenset({"cup"}))]
    [c] = allocate([TaskNeed("t1", skills=("scan",), perceive=("cat",))], fleet)
    assert c.robot_id is None and c.why == "no robot is available: arm_1 has no skill scan; tello_1 busy with goal 9"
    [c] = allocate([TaskNeed("t1", perceive=("giraffe",))], fleet)
    assert c.why == "no robot can do it: arm_1 cannot perceive 'giraffe'; tello_1 cannot perceive 'giraffe'"
    a, b = allocate([TaskNeed("a", perceive=("cat",)), TaskNeed("b", perceive=("cat",))], [drone("tello_1")])
    assert {a.robot_id, b.robot_id} == {"tello_1", None}
    assert (a if a.robot_id is None else b).why == "every robot able to do it is taken by another task of this mission"
    assert allocate([TaskNeed("t")], [])[0].why == "the fleet has no robot"


_offers = st.lists(st.tuples(st.sets(st.sampled_from(["cat", "dog", "cup"])),
                             st.floats(0.0, 100.0), st.booleans()), min_size=0, max_size=4)
_needs = st.lists(st.sets(st.sampled_from(["cat", "dog", "cup"]), max_size=2), min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(offers=_offers, needs=_needs)
def test_every_choice_is_able_and_free_once_and_the_assignment_is_the_best(offers, needs):
    fleet = [drone(f"r{k}", s, perceivable=frozenset(p), busy_with="goal x" if busy else "")
             for k, (p, s, busy) in enumerate(offers)]
    tasks = [TaskNeed(f"t{i}", perceive=tuple(sorted(p))) for i, p in enumerate(needs)]
    choices = allocate(tasks, fleet)
    chosen = [c.robot_id for c in choices if c.robot_id is not None]
    assert len(chosen) == len(set(chosen))  # one task per robot
    by_id = {r.robot_id: r for r in fleet}
    for need, c in zip(tasks, choices):
        if c.robot_id is not None:
            r = by_id[c.robot_id]
            assert incapable(need, r) is None and unavailable(need, r) is None
    # brute force over every assignment: the most tasks served, then the least total time
    ok = [[incapable(n, r) is None and unavailable(n, r) is None for r in fleet] for n in tasks]
    best = (0, 0.0)
    slots = list(range(len(fleet))) + [None] * len(tasks)
    for perm in itertools.permutations(slots, len(tasks)):
        if any(j is not None and not ok[i][j] for i, j in enumerate(perm)):
            continue
        served = [(i, j) for i, j in enumerate(perm) if j is not None]
        score = (len(served), -sum(fleet[j].expected_s for _, j in served))
        best = max(best, score)
    got = (len(chosen), -sum(by_id[r].expected_s for r in chosen))
    assert got[0] == best[0] and abs(got[1] - best[1]) < 1e-6
