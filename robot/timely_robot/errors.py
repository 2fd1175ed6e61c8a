"""The user's mistake a command can name: :class:`CommandError`, whose message is one sentence
saying what to change. Both the planner's and the robot's commands raise it."""


class CommandError(Exception):
    """A mistake the user can fix; its message is one sentence saying what to change."""
