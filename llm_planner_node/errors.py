"""Which exceptions are the user's mistakes (:func:`is_user_error`); the error every command raises
for one it can name is :class:`timely_robot.errors.CommandError`. Below the commands, the tools and the
composition root, so all of them import it without importing each other."""

from __future__ import annotations

import sys


#: Exceptions that are user mistakes, as (module, class): matched only if the module was imported
#: (a class from a module that never loaded cannot have been raised), so nothing is imported here.
USER_ERRORS = (("timely_robot.errors", "CommandError"), ("timely_robot.config", "ParamError"),
               ("timely_tools.evaluation.workload_spec", "SpecError"), ("timely_robot.model_cache", "ModelError"),
               ("llm_planner_node.security.sros2_policy", "PolicyError"))


def is_user_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a mistake the user can fix (a command prints it as one sentence)."""
    for module_name, cls_name in USER_ERRORS:
        cls = getattr(sys.modules.get(module_name), cls_name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return True
    return False
