"""The segment delivery protocol between the planner and a robot's adapter (no ROS).

Segment topics are volatile and DDS can lose a message to an adapter that (re)starts, so:

- every dispatched segment is **re-sent** every ``ack_timeout_s`` until the adapter
  acknowledges it (any ``/robot_status`` report naming that goal and sequence), at most
  ``max_resends`` times;
- a robot that owes a report (a segment dispatched and not yet executed) and has been quiet for
  ``ack_timeout_s`` is **probed**: its oldest unfinished segment is re-sent, and the adapter
  answers a duplicate with its latest status for it. A status lost on the way (a flooded reader
  drops samples) is recovered this way, and a long skill is not mistaken for silence;
- an adapter that stays **silent** for ``silence_timeout_s`` while it owes a report is reported
  by :meth:`SegmentDelivery.silent`;
- a goal that ended other than by success **owes a stop**: the stop message is re-sent until the
  adapter confirms (an IDLE report for that goal), at most ``max_resends`` times; unconfirmed
  stops are counted.

Messages are opaque here (the node passes its ROS messages); time comes from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Link:
    robot_id: str
    last_heard: float
    sent: dict[int, tuple[float, int, Any]] = field(default_factory=dict)  # seq -> (last send, sends, msg)
    acked: set[int] = field(default_factory=set)
    finished: set[int] = field(default_factory=set)  # reported DONE or FAILED


@dataclass
class _Stop:
    robot_id: str
    msg: Any
    last_sent: float
    sends: int = 1


class SegmentDelivery:
    """Acknowledgements, re-sends, silence and stops of every goal in flight (one thread)."""

    def __init__(self, ack_timeout_s: float = 1.0, max_resends: int = 3, silence_timeout_s: float = 30.0) -> None:
        self.ack_timeout_s = ack_timeout_s
        self.max_resends = max_resends
        self.silence_timeout_s = silence_timeout_s
        self._links: dict[str, _Link] = {}
        self._stops: dict[str, _Stop] = {}
        self.resends = 0
        self.probes = 0
        self.stops_sent = 0
        self.stops_unconfirmed = 0

    # -- goals ---------------------------------------------------------------------------------
    def open(self, goal_id: str, robot_id: str, now: float) -> None:
        self._links[goal_id] = _Link(robot_id, now)

    def close(self, goal_id: str) -> None:
        """The goal ended: nothing more to re-send for it (a stop, if owed, is kept)."""
        self._links.pop(goal_id, None)

    def sent(self, goal_id: str, seq: int, msg: Any, now: float) -> None:
        """Segment ``seq`` went out. When the robot owed no report before it (every earlier
        segment finished, or this is the first), its silence clock starts now: time a goal spent
        queued for the engine, or a robot spent waiting for its next segment, is not silence."""
        link = self._links.get(goal_id)
        if link is not None:
            if all(k in link.finished for k in link.sent):
                link.last_heard = max(link.last_heard, now)
            link.sent[seq] = (now, 1, msg)

    def heard(self, goal_id: str, seq: int, now: float, finished: bool = False) -> bool:
        """A report from the goal's adapter about segment ``seq``: acknowledges it (``finished``:
        it reported the segment DONE or FAILED)."""
        link = self._links.get(goal_id)
        if link is None:
            return False
        link.last_heard = now
        link.acked.add(seq)
        if finished:
            link.finished.add(seq)
        return True

    def probe_gap(self, goal_id: str, seq: int, now: float) -> tuple[str, Any] | None:
        """The robot reported segment ``seq``; adapters run segments strictly in order, so an
        earlier segment not yet reported finished lost its report: re-send the oldest such one
        (at most once per ``ack_timeout_s``) and return ``(robot_id, msg)``, else None."""
        link = self._links.get(goal_id)
        if link is None:
            return None
        for k in sorted(link.sent):
            if k >= seq:
                return None
            if k not in link.finished:
                t, n, msg = link.sent[k]
                if now - t < self.ack_timeout_s:
                    return None
                link.sent[k] = (now, n, msg)
                self.probes += 1
                return link.robot_id, msg
        return None

    def held(self, goal_id: str, now: float) -> None:
        """The planner holds the goal's next segment (it waits for an operator's approval): a
        robot that owes no report for what it was sent is not silent, so its clock stands still."""
        link = self._links.get(goal_id)
        if link is not None and all(k in link.finished for k in link.sent):
            link.last_heard = max(link.last_heard, now)

    def silent_for(self, goal_id: str, now: float) -> float:
        link = self._links.get(goal_id)
        return 0.0 if link is None else now - link.last_heard

    # -- stops ---------------------------------------------------------------------------------
    def stop(self, goal_id: str, robot_id: str, msg: Any, now: float) -> None:
        """The goal ended early: owe the adapter a stop until it confirms."""
        self._links.pop(goal_id, None)
        self._stops[goal_id] = _Stop(robot_id, msg, now)
        self.stops_sent += 1

    def stop_confirmed(self, goal_id: str, robot_id: str) -> bool:
        st = self._stops.get(goal_id)
        if st is None or st.robot_id != robot_id:
            return False
        del self._stops[goal_id]
        return True

    def stops_pending(self) -> int:
        return len(self._stops)

    def owes_stop(self, goal_id: str, robot_id: str | None = None) -> bool:
        """A stop for the goal (to ``robot_id``, if given) awaits its adapter's confirmation (any
        thread may ask)."""
        st = self._stops.get(goal_id)
        return st is not None and (robot_id is None or st.robot_id == robot_id)

    # -- the periodic check --------------------------------------------------------------------
    def due(self, now: float, owes: dict[str, bool] | None = None
            ) -> tuple[list[tuple[str, Any]], list[tuple[str, str, int]]]:
        """What to re-send now, as ``(robot_id, msg)``, and the stops given up on, as
        ``(goal_id, robot_id, sends)`` (the adapter never confirmed). ``owes[goal_id]``: the
        robot owes a report (probing, see the module docstring)."""
        out: list[tuple[str, Any]] = []
        for goal_id, link in self._links.items():
            resent = False
            for seq, (t, n, msg) in list(link.sent.items()):
                if seq not in link.acked and now - t >= self.ack_timeout_s and n <= self.max_resends:
                    link.sent[seq] = (now, n + 1, msg)
                    out.append((link.robot_id, msg))
                    self.resends += 1
                    resent = True
            if resent or not (owes or {}).get(goal_id) or now - link.last_heard < self.ack_timeout_s:
                continue
            pending = [seq for seq in sorted(link.sent) if seq not in link.finished]
            if pending:
                t, n, msg = link.sent[pending[0]]
                if now - t >= self.ack_timeout_s:
                    link.sent[pending[0]] = (now, n, msg)
                    out.append((link.robot_id, msg))
                    self.probes += 1
        given_up = []
        for goal_id, st in list(self._stops.items()):
            if now - st.last_sent < self.ack_timeout_s:
                continue
            if st.sends > self.max_resends:
                del self._stops[goal_id]
                self.stops_unconfirmed += 1
                given_up.append((goal_id, st.robot_id, st.sends))
                continue
            st.last_sent, st.sends = now, st.sends + 1
            out.append((st.robot_id, st.msg))
        return out, given_up

    def pause(self, seconds: float) -> None:
        """Stop the silence clocks for ``seconds`` (the receiver, not the robots, was saturated)."""
        for link in self._links.values():
            link.last_heard += seconds

    def silent(self, now: float, owes: dict[str, bool]) -> list[tuple[str, float]]:
        """Goals whose adapter owes a report (``owes[goal_id]``) and was silent too long."""
        return [(g, now - link.last_heard) for g, link in self._links.items()
                if owes.get(g) and now - link.last_heard > self.silence_timeout_s]
