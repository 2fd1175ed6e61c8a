"""Content-aware segmenters (stop checkers) for segmented plan generation.

Use :func:`get_segmenter` to create one per generation; see :mod:`.base` for the interface and
:mod:`.minispec` for the MiniSpec parser/AST.
"""

from llm_planner_node.segmenters.base import SEGMENTER_NAMES, Segment, Segmenter, get_segmenter, segment_all
from timely_robot.plans import PlanError, PlanSyntaxError, UnsafePlanError
from llm_planner_node.segmenters import arm, chat, minispec  # noqa: F401,E402 - each registers its segmenter (base imports none)

__all__ = [
    "SEGMENTER_NAMES",
    "PlanError",
    "PlanSyntaxError",
    "Segment",
    "Segmenter",
    "UnsafePlanError",
    "get_segmenter",
    "segment_all",
]
