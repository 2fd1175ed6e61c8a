"""What a standby planner needs to continue a goal in flight (no ROS): a journal entry per goal.

The active planner writes one :class:`JournalEntry` per goal in flight (:func:`entries`, on its
scheduler thread) and the node publishes them, signed, on ``planner/journal``. A standby keeps the
latest journal; when it takes over, its intake adopts each entry (``GoalIntake.adopt``): the same
goal (prompt token ids, scene, time utility, max_tokens), its time-utility clock running from the
same arrival (``age_s`` before the journal's stamp), and the generation's progress
(:class:`~llm_planner_node.core.task_model.Progress`): segments, token ids, what was dispatched
and executed. Times in an entry are relative to the goal's arrival, so no clock is shared between
the two planners' processes.

What is not covered: tokens generated after the last journal entry are generated again (greedy
decoding writes the same ones; a sampled plan may differ in segments not yet dispatched), and a
robot's report that reached only the planner that died is asked for again (the re-sent segment is
answered with the robot's latest status for it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


def entry_of(goal_id: str, req: Request, now: float) -> JournalEntry:
    """The journal entry of a live request (scheduler thread)."""
    g = req.goal
    a = req.arrival
    n = len(req.segments)

    def rel(ts: list, count: int) -> tuple[float | None, ...]:
        return tuple((None if k >= len(ts) or ts[k] is None else float(ts[k] - a)) for k in range(count))

    prompt_ids = (tuple(int(t) for t in g.prompt) if isinstance(g.prompt, (list, tuple))
                  and all(isinstance(t, int) for t in g.prompt) else ())
    progress = Progress(
        segments=tuple(Segment(k, s.text, s.calls, tuple(int(t) for t in s.token_ids), s.final)
                       for k, s in enumerate(req.segments)),
        gen_start=rel(req.gen_start, n), gen_end=rel(req.gen_end, n),  # type: ignore[arg-type]
        dispatched_at=rel(req.dispatched_at, n), exec_start=rel(req.exec_start, n), exec_end=rel(req.exec_end, n),
        generated=req.state is GenState.GENERATED, truncated=req.truncated, answers=dict(req.answers),
        return_value=req.return_value, seq_base=req.seq_base,
        earlier_plans=tuple("".join(s.text for s in r.segments) for r in req.earlier))
    return JournalEntry(goal_id=goal_id,
                        goal=GoalIn(robot_id=g.robot_id, instruction=g.instruction, robot_kind=g.robot_kind,
                                    task_type=g.task_type, ert_s=g.tuf.ert, alpha=g.tuf.alpha, beta=g.tuf.beta,
                                    skill_set=g.skill_set_id or "", max_tokens=g.max_tokens),
                        age_s=float(now - a), scene=g.scene, prompt_token_ids=prompt_ids, progress=progress,
                        replans=len(req.earlier))


def entries(goals: GoalRegistry, planner: Planner, now: float) -> list[JournalEntry]:
    """Every goal in flight (scheduler thread), in request order."""
    out = []
    for rid, g in sorted(goals.by_request.items()):
        req = planner.requests.get(rid)
        if req is not None and not req.state.terminal:
            out.append(entry_of(g.goal_id, req, now))
    return out
