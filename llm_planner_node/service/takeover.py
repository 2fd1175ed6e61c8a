"""What a standby planner needs to continue a goal in flight (no ROS): a journal entry per goal.

The active planner writes one :class:`JournalEntry` per goal that changed since its last journal
(:func:`take`, on its scheduler thread: a delta), or per goal in flight (a snapshot, for a
standby that joins or asks, and at a slow period), and the node serializes, signs and publishes
them on ``planner/journal`` off that thread. A standby applies them to its :class:`JournalReplica`
(a snapshot replaces what it holds, a delta updates the goals it names and forgets the ones that
ended); a gap in the journals' sequence numbers tells it that it missed one, and it asks for a
snapshot. When it takes over, its intake adopts each entry (``GoalIntake.adopt``): the same
goal (prompt token ids, scene, time utility, max_tokens), its time-utility clock running from the
same arrival (``age_s`` when the entry was written, plus the time since it was received), and the
generation's progress
(:class:`~llm_planner_node.core.task_model.Progress`): segments, token ids, what was dispatched
and executed. Times in an entry are relative to the goal's arrival, so no clock is shared between
the two planners' processes.

What is not covered: tokens generated after the last journal entry are generated again (greedy
decoding writes the same ones; a sampled plan may differ in segments not yet dispatched), and a
robot's report that reached only the planner that died is asked for again (the re-sent segment is
answered with the robot's latest status for it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from llm_planner_node.core.planner import Planner
from llm_planner_node.core.task_model import GenState, Progress, Request, Segment
from llm_planner_node.service.ports import GoalIn
from llm_planner_node.service.registry import GoalRegistry


@dataclass(frozen=True)
class JournalEntry:
    """One goal in flight, as a standby needs it (module docstring). Segment times are seconds
    after the goal's arrival (None: not yet)."""

    goal_id: str
    goal: GoalIn                       # the goal's fields; max_tokens as the planner resolved it
    age_s: float                       # seconds since the goal's arrival, when the entry was written
    scene: tuple[str, ...] | None = None
    prompt_token_ids: tuple[int, ...] = ()  # empty: the prompt is text, rebuilt from instruction and scene
    progress: Progress = field(default_factory=Progress)
    replans: int = 0
    cancel_key_sha256: str = ""
    # True: only the goal's progress (its prompt, scene, earlier plans and cancel key are as in its
    # last whole entry, which a replica keeps): a delta sends a goal whole once per generation
    progress_only: bool = False

    def at(self, arrival: float) -> Progress:
        """The progress with absolute times on a clock where the goal arrived at ``arrival``."""
        p = self.progress

        def shift(ts: tuple[float | None, ...]) -> tuple[float | None, ...]:
            return tuple(None if t is None else arrival + t for t in ts)

        return Progress(segments=p.segments, gen_start=shift(p.gen_start), gen_end=shift(p.gen_end),  # type: ignore[arg-type]
                        dispatched_at=shift(p.dispatched_at), exec_start=shift(p.exec_start),
                        exec_end=shift(p.exec_end), generated=p.generated, truncated=p.truncated,
                        answers=p.answers, return_value=p.return_value, seq_base=p.seq_base,
                        earlier_plans=p.earlier_plans)


def entry_of(goal_id: str, req: Request, now: float, whole: bool = True) -> JournalEntry:
    """The journal entry of a live request (scheduler thread); ``whole=False``: its progress only
    (the prompt's token ids and the earlier plans are left out)."""
    g = req.goal
    a = req.arrival
    n = len(req.segments)

    def rel(ts: list, count: int) -> tuple[float | None, ...]:
        return tuple((None if k >= len(ts) or ts[k] is None else float(ts[k] - a)) for k in range(count))

    prompt_ids = (tuple(int(t) for t in g.prompt) if whole and isinstance(g.prompt, (list, tuple))
                  and all(isinstance(t, int) for t in g.prompt) else ())
    progress = Progress(
        segments=tuple(Segment(k, s.text, s.calls, tuple(int(t) for t in s.token_ids), s.final)
                       for k, s in enumerate(req.segments)),
        gen_start=rel(req.gen_start, n), gen_end=rel(req.gen_end, n),  # type: ignore[arg-type]
        dispatched_at=rel(req.dispatched_at, n), exec_start=rel(req.exec_start, n), exec_end=rel(req.exec_end, n),
        generated=req.state is GenState.GENERATED, truncated=req.truncated, answers=dict(req.answers),
        return_value=req.return_value, seq_base=req.seq_base,
        earlier_plans=tuple("".join(s.text for s in r.segments) for r in req.earlier) if whole else ())
    return JournalEntry(goal_id=goal_id,
                        goal=GoalIn(robot_id=g.robot_id, instruction=g.instruction, robot_kind=g.robot_kind,
                                    task_type=g.task_type, ert_s=g.tuf.ert, alpha=g.tuf.alpha, beta=g.tuf.beta,
                                    skill_set=g.skill_set_id or "", max_tokens=g.max_tokens),
                        age_s=float(now - a), scene=g.scene if whole else None, prompt_token_ids=prompt_ids,
                        progress=progress, replans=len(req.earlier), progress_only=not whole)


def entries(goals: GoalRegistry, planner: Planner, now: float) -> list[JournalEntry]:
    """Every goal in flight (scheduler thread), in request order."""
    out = []
    for rid, g in sorted(goals.by_request.items()):
        req = planner.requests.get(rid)
        if req is not None and not req.state.terminal:
            out.append(entry_of(g.goal_id, req, now))
    return out


@dataclass(frozen=True)
class JournalTake:
    """What the journal took from the scheduler thread at one moment: a snapshot (every goal in
    flight) or a delta (the goals in flight that changed since the last take), the scheduler
    thread's CPU seconds the take cost, and the new sightings of the fleet memory."""

    snapshot: bool
    entries: tuple[JournalEntry, ...]
    cpu_s: float
    #: what robots saw since the last take (service/memory.py: a standby records them in its own
    #: memory); a snapshot carries only these, never the memory's older sightings
    sightings: tuple[Any, ...] = ()


def take(goals: GoalRegistry, planner: Planner, now: float, what: str = "delta") -> JournalTake:
    """The journal's take (scheduler thread): ``snapshot``, every goal in flight; ``delta``, the
    entries of the goals changed since the last take (:meth:`GoalRegistry.take_changed`: whole
    for a goal added since, its progress only for the others); both
    forget the changes, so a delta after a snapshot carries only what changed after it;
    ``heartbeat``, nothing (the changes are kept)."""
    if what not in ("delta", "snapshot", "heartbeat"):
        raise ValueError(f"a journal take is a delta, a snapshot or a heartbeat, not {what!r}")
    t0 = time.thread_time()
    if what == "heartbeat":
        return JournalTake(False, (), time.thread_time() - t0)
    snapshot = what == "snapshot"
    changed, fresh = goals.take_changed()
    if snapshot:
        out = entries(goals, planner, now)
    else:
        out = []
        for goal_id in changed:
            rid = goals.by_goal_id.get(goal_id)
            req = planner.requests.get(rid) if rid is not None else None
            if req is not None and not req.state.terminal:
                out.append(entry_of(goal_id, req, now, whole=goal_id in fresh))
    return JournalTake(snapshot, tuple(out), time.thread_time() - t0)


class JournalReplica:
    """A standby's copy of the active planner's goals in flight, built from its journals (ROS-free:
    a journal is any object with ``node``, ``term``, ``sequence``, ``snapshot``, ``goals`` (each with
    a ``goal_id``) and ``ended_goal_ids``, as ``timely_fleet/PlannerJournal``).

    A snapshot replaces what it holds and makes it in sync; a delta updates the goals it names and
    forgets those that ended. A delta that does not follow the last journal applied (another
    planner, a sequence gap, none applied yet) is applied all the same (what it holds stays the
    best guess) but leaves the replica out of sync: :attr:`needs_snapshot` says why until a
    snapshot arrives. Each goal keeps when it was received (monotonic s), so its time-utility clock
    runs on while the standby waits."""

    def __init__(self) -> None:
        self.goals: dict[str, tuple[Any, float]] = {}  # goal id -> (its latest entry, received at)
        self.node = ""
        self.term = 0
        self.sequence = 0
        self.needs_snapshot: str | None = "no snapshot received yet"
        self.applied = 0
        self.gaps = 0
        self.snapshots = 0

    def apply(self, journal: Any, now: float | None = None) -> str | None:
        """Apply a trusted journal of the planner followed; why a snapshot is needed now, or None."""
        now = time.monotonic() if now is None else now
        node, term, seq = str(journal.node), int(journal.term), int(journal.sequence)
        if journal.snapshot:
            self.goals = {g.goal_id: (g, now) for g in journal.goals}
            self.needs_snapshot = None
            self.snapshots += 1
        else:
            if self.needs_snapshot is None:
                if (node, term) != (self.node, self.term):
                    self.needs_snapshot = f"a journal of planner {node} (term {term}) before its snapshot"
                elif seq != self.sequence + 1:
                    self.gaps += 1
                    self.needs_snapshot = f"journal {seq} followed journal {self.sequence}: {max(0, seq - self.sequence - 1)} missed"
            for g in journal.goals:
                if getattr(g, "progress_only", False):
                    held = self.goals.get(g.goal_id)
                    if held is None:  # its whole entry was missed: nothing to add the progress to
                        self.needs_snapshot = self.needs_snapshot or f"progress of goal {g.goal_id[:8]} before its start"
                        continue
                    g = self.merge(held[0], g)
                self.goals[g.goal_id] = (g, now)
            for goal_id in journal.ended_goal_ids:
                self.goals.pop(goal_id, None)
        self.node, self.term, self.sequence = node, term, seq
        self.applied += 1
        return self.needs_snapshot

    #: what a progress-only entry leaves out (JournalGoal's static fields)
    STATIC_FIELDS = ("robot_kind", "task_type", "instruction", "skill_set", "ert_s", "alpha", "beta", "max_tokens",
                     "cancel_key_sha256", "scene", "prompt_token_ids", "earlier_plans", "replans")

    @classmethod
    def merge(cls, whole: Any, progress: Any) -> Any:
        """``progress`` (a progress-only entry) completed with the static fields of ``whole``."""
        for name in cls.STATIC_FIELDS:
            setattr(progress, name, getattr(whole, name))
        progress.progress_only = False
        return progress

    def entries(self, now: float | None = None) -> list[tuple[Any, float]]:
        """Every goal held, with the seconds since it was received (to add to its ``age_s``), in
        the order they were received."""
        now = time.monotonic() if now is None else now
        return [(g, max(0.0, now - at)) for g, at in sorted(self.goals.values(), key=lambda x: x[1])]

    def __len__(self) -> int:
        return len(self.goals)


def aged(entry: JournalEntry, seconds: float) -> JournalEntry:
    """``entry`` as it stands ``seconds`` after it was written (its goal's age runs on)."""
    return replace(entry, age_s=entry.age_s + seconds)
