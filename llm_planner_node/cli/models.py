"""`timely-fleet models`: the models the planner can run, and their preparation.

    timely-fleet models                   # table: name, prepared, size, path or source
    timely-fleet models prepare NAME|PATH  # prepare one (no-op when prepared); prints its directory

NAME is a registry name (``embedded``, ``smollm2-135m-instruct``, ``smollm2-135m-planner``,
``gemma3-270m``; the last is not prepared by ``make setup``: 1.1 GB, about 1 min, on first use);
PATH a ``.gguf`` file (converted into the cache) or a Hugging Face directory (used as it is).
The cache is ``$TIMELY_FLEET_MODELS`` or ``~/.cache/timely_fleet/models``
(:mod:`llm_planner_node.models`). ``planner.engine.model`` in the fleet YAML, or ``--model`` of
``timely-fleet up`` / ``demo``, takes the same names and paths.
"""

from __future__ import annotations

import argparse
import sys

from llm_planner_node.cli import CommandError

ACTIONS = ("list", "prepare")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", default="list", choices=ACTIONS,
                        help="list (default): the table of models; prepare: prepare NAME into the cache")
    parser.add_argument("name", nargs="?", metavar="NAME|PATH",
                        help="prepare: a model name of the list, a .gguf file or a Hugging Face directory")
    parser.add_argument("--force", action="store_true", help="prepare: prepare again even when prepared")


def _table(rows: list[dict]) -> str:
    from llm_planner_node.models import format_size

    head = ("NAME", "PREPARED", "SIZE", "PATH / SOURCE")
    lines = [(r["name"], "yes" if r["prepared"] else "no", format_size(r["size"]) if r["prepared"] else "-",
              r["path"] if r["prepared"] else f"from {r['source']}") for r in rows]
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(3)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    return "\n".join(fmt.format(*x) for x in [head, *lines])


def run(args: argparse.Namespace) -> int:
    from llm_planner_node import models

    if args.action == "list":
        if args.name:
            raise CommandError(f"'models {args.name}': did you mean 'timely-fleet models prepare {args.name}'?")
        print(_table(models.list_models()))
        print(f"\ncache: {models.cache_root()} (TIMELY_FLEET_MODELS); prepare one with "
              "'timely-fleet models prepare NAME'")
        return 0
    if not args.name:
        raise CommandError(f"'models prepare' needs a model: one of {', '.join(models.model_names())}, "
                           "a .gguf file or a Hugging Face directory")
    try:
        path = models.prepare(args.name, force=args.force)
    except models.ModelError as e:
        raise CommandError(str(e)) from None
    except KeyboardInterrupt:
        print("interrupted: nothing was written to the cache", file=sys.stderr)
        return 130
    print(path)
    return 0
