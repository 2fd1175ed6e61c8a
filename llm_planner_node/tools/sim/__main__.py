"""``python -m llm_planner_node.tools.sim``: see :mod:`.run`."""

import argparse

from llm_planner_node.tools.sim.run import add_arguments, run

parser = argparse.ArgumentParser(prog="python -m llm_planner_node.tools.sim",
                                 description="Simulate a workload under scheduling policies.")
add_arguments(parser)
raise SystemExit(run(parser.parse_args()))
