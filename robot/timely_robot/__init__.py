"""The robot side of the timely_fleet link, installable on a robot's computer without the planner:
skills and their safe ranges, budgets, the link's rules (sequence, term, lease, signing), outcomes,
the MiniSpec language and its interpreter, a plan's cost, and a robot's entry of the fleet YAML.
It imports neither ``llm_planner_node`` nor vLLM nor torch (.importlinter: robot-side-alone)."""

__version__ = "0.1.0"
