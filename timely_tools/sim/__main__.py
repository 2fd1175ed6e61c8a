"""``python -m timely_tools.sim``: see :mod:`.run`."""

import argparse

from timely_tools.sim.run import add_arguments, run

parser = argparse.ArgumentParser(prog="python -m timely_tools.sim",
                                 description="Simulate a workload under scheduling policies.")
add_arguments(parser)
raise SystemExit(run(parser.parse_args()))
