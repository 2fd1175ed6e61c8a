"""Scheduling policies, selectable by name: ``get_policy("timelyllm", max_batch=None)``.

Every module of this package except ``base`` is imported here, so adding a policy means adding
one module that registers its class (see :mod:`.base`).
"""

from __future__ import annotations

import importlib
import pkgutil

from llm_planner_node.core.policies.base import REGISTRY, Decision, Policy, register

for _m in pkgutil.iter_modules(__path__):
    if _m.name != "base":
        importlib.import_module(f"{__name__}.{_m.name}")


#: Policies that run on a live engine with a length predictor of the planner model, and which one
#: (``engines.factory.predictor_for`` builds it; the others need the simulator's predictions).
LIVE_PREDICTORS = {"trail": "trail_probe", "hybrid": "trail_probe", "ltr": "ltr_ranker"}


def policy_names() -> list[str]:
    return sorted(REGISTRY)


def get_policy(name: str, **params: object) -> Policy:
    """A new policy instance; ``params`` go to its constructor (e.g. ``max_batch``).

    ``admission`` (``literal`` / ``improved``) is the admission shared by segmented policies;
    it is ignored for the baselines that keep their own (``vllm``, Trail, LTR, LAMPS, hybrid).
    """
    try:
        cls = REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown policy '{name}' (known: {', '.join(policy_names())})") from None
    if not cls.shared_admission:
        params.pop("admission", None)
    elif params.get("admission") is None:
        params.pop("admission", None)
    return cls(**params)


__all__ = ["LIVE_PREDICTORS", "Decision", "Policy", "get_policy", "policy_names", "register"]
