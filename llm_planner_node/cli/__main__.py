"""``python -m llm_planner_node.cli``: the `timely-fleet` command (scripts/env.sh re-executes it so)."""

import sys

from llm_planner_node.cli import main

sys.exit(main())
