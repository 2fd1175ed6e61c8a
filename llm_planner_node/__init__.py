"""timely_fleet planning node: segmented, time-utility scheduled LLM planning for robot fleets."""

__version__ = "0.1.0"
