"""Engine backends behind :class:`llm_planner_node.core.engine_api.Engine`."""
