"""Logs: third-party libraries at WARNING on stderr, one `ready` line,
`--log-level`, the project's loggers through the rclpy logger, progress lines for `paper` and
`compare` on stderr while stdout stays for the report."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TF = [sys.executable, "-m", "llm_planner_node.cli"]
#: a ROS log line: [SEVERITY] [stamp] [logger]: message
ROS_LINE = re.compile(r"^\[(DEBUG|INFO|WARN|ERROR|FATAL)\] \[\d+\.\d+\] \[([^\]]+)\]: (.*)$")
#: loggers whose INFO lines are ours (project loggers, the nodes' own loggers)
OURS = re.compile(r"^(timely_fleet|llm_planner_node|robot_adapters|llm_planner|fleet_adapters)\b")


def _python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def _tf(*args: str, timeout: float = 300, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([*TF, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _fleet(tmp_path: Path) -> str:
    """The default fleet (djitellopy + Tello simulator, fake IndyDCP3 arm, ...) with the fake arm
    on an address of its own, so parallel `up` runs on this machine do not collide."""
    import os
    import random

    import yaml

    doc = yaml.safe_load((ROOT / "config" / "fleet.yaml").read_text())
    rnd = random.Random(os.getpid())
    for r in doc["robots"]:
        if r.get("adapter") == "indy-sim":
            r["host"] = f"127.{rnd.randint(20, 250)}.{rnd.randint(1, 250)}.{rnd.randint(2, 250)}"
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _foreign_info(lines: list[str]) -> list[str]:
    """INFO lines that are not from the project or its nodes (third-party noise)."""
    bad = []
    for line in lines:
        m = ROS_LINE.match(line)
        if m:
            if m.group(1) in ("INFO", "DEBUG") and not OURS.match(m.group(2)):
                bad.append(line)
        elif re.search(r"\bINFO\b|FutureWarning|tello\.py - |\[djitellopy\]", line):
            bad.append(line)
    return bad


# ------------------------------------------------------------------------------- unit level
def test_vllm_gets_warning_level_on_stderr_and_expected_notices_are_dropped():
    """What vLLM's processes read (environment + logging config file), applied as vLLM applies
    it, without starting vLLM."""
    p = _python("""
        import json, logging, logging.config, os
        from timely_robot.logging_setup import configure_logging
        configure_logging("info", ros=False)
        assert os.environ["VLLM_LOGGING_LEVEL"] == "WARNING", os.environ["VLLM_LOGGING_LEVEL"]
        assert os.environ["VLLM_LOGGING_STREAM"] == "ext://sys.stderr"
        logging.config.dictConfig(json.load(open(os.environ["VLLM_LOGGING_CONFIG_PATH"])))
        lg = logging.getLogger("vllm.v1.engine.core")
        lg.info("engine config line")
        lg.warning("Triton is not installed. triton-cpu is expected on x86 CPUs.")
        lg.warning("libtcmalloc is not found in LD_PRELOAD. For best performance ...")
        lg.warning("a real vLLM warning")
        logging.getLogger("transformers.x").info("transformers info")
        import warnings
        warnings.warn("old api", FutureWarning)
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""
    assert "a real vLLM warning" in p.stderr
    for noise in ("engine config line", "Triton", "tcmalloc", "transformers info", "FutureWarning"):
        assert noise not in p.stderr, (noise, p.stderr)


def test_debug_level_lets_everything_through():
    p = _python("""
        import json, logging, logging.config, os
        from timely_robot.logging_setup import configure_logging
        configure_logging("debug", ros=False)
        assert os.environ["VLLM_LOGGING_LEVEL"] == "DEBUG"
        logging.config.dictConfig(json.load(open(os.environ["VLLM_LOGGING_CONFIG_PATH"])))
        logging.getLogger("vllm.x").info("engine config line")
        logging.getLogger("vllm.x").warning("Triton is not installed.")
        logging.getLogger("llm_planner_node.x").debug("project debug line")
    """)
    assert p.returncode == 0, p.stderr
    for line in ("engine config line", "Triton is not installed", "project debug line"):
        assert line in p.stderr, (line, p.stderr)


@pytest.mark.ros
def test_project_loggers_go_through_the_rclpy_logger_at_the_chosen_level():
    p = _python("""
        import logging
        from timely_robot.logging_setup import configure_logging
        configure_logging("info")
        logging.getLogger("timely_fleet.test").info("hello info")
        logging.getLogger("timely_fleet.test").debug("hidden debug")
        logging.getLogger("robot_adapters.x").warning("hello warning")
        configure_logging("warning")
        logging.getLogger("llm_planner_node.x").info("hidden info")
        import rclpy.logging
        rclpy.logging.get_logger("llm_planner").info("hidden node info")
    """)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert any(ROS_LINE.match(x) and x.endswith("[timely_fleet.test]: hello info") and x.startswith("[INFO]")
               for x in lines), p.stderr
    assert any(x.startswith("[WARN]") and x.endswith("[robot_adapters.x]: hello warning") for x in lines), p.stderr
    assert "hidden" not in p.stderr and p.stdout == ""


def test_djitellopy_info_lines_are_not_shown(capfd):
    """djitellopy's import sets its logger to INFO (a line per command); connecting quiets it."""
    pytest.importorskip("djitellopy")
    import logging

    import djitellopy  # noqa: F401 - the import is what sets INFO
    from robot_adapters.drone_executor import TelloExecutor

    class FakeTello:
        def __init__(self) -> None:
            logging.getLogger("djitellopy").info("Tello instance was initialized (probe)")

        def connect(self) -> None:
            logging.getLogger("djitellopy").info("Send command: 'command' (probe)")

    capfd.readouterr()
    TelloExecutor("127.0.0.1", client_factory=FakeTello).connect()
    err = capfd.readouterr().err
    assert "initialized (probe)" not in err and "Send command" not in err
    lg = logging.getLogger("djitellopy")
    assert lg.isEnabledFor(logging.WARNING) and not lg.isEnabledFor(logging.INFO)  # warnings still shown


# ------------------------------------------------------------------------------- commands
@pytest.mark.ros
def test_up_prints_one_ready_line_and_no_third_party_info(tmp_path):
    p = _tf("up", "--params", _fleet(tmp_path), "--engine", "sim", "--seconds", "3", timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""  # logs go to stderr: `up > file` stays empty
    lines = p.stderr.splitlines()
    ready = [x for x in lines if re.search(r"\]: ready\b", x)]
    assert len(ready) == 1, p.stderr
    assert ROS_LINE.match(ready[0]) and "[timely_fleet.up]" in ready[0]
    assert "sim engine loaded" in ready[0] and "plan_task" in ready[0]
    assert not _foreign_info(lines), _foreign_info(lines)
    assert "Traceback" not in p.stderr
    before_ready = lines[: lines.index(ready[0])]
    assert len(before_ready) <= 4, before_ready  # starting ..., planner ready, (a robot note)


@pytest.mark.ros
def test_up_log_level_debug_shows_more_and_warning_less(tmp_path):
    fleet = _fleet(tmp_path)
    info = _tf("up", "--params", fleet, "--engine", "sim", "--seconds", "1", timeout=120)
    debug = _tf("up", "--params", fleet, "--engine", "sim", "--seconds", "1", "--log-level", "debug", timeout=120)
    warning = _tf("up", "--params", fleet, "--engine", "sim", "--seconds", "1", "--log-level", "warning", timeout=120)
    assert info.returncode == debug.returncode == warning.returncode == 0, debug.stderr[-2000:]
    assert "[DEBUG]" in debug.stderr and "[DEBUG]" not in info.stderr
    assert len(debug.stderr.splitlines()) > len(info.stderr.splitlines()) + 10
    assert "[INFO]" not in warning.stderr and "ready" not in warning.stderr


@pytest.mark.ros
@pytest.mark.vllm
@pytest.mark.slow
def test_up_on_vllm_is_quiet_until_ready(tmp_path):
    """Before: ~50 lines of vLLM/torch output (a 4 KB engine-config line, Triton and tcmalloc
    notices, FutureWarnings), on stdout; `vLLM ready` never shown."""
    pytest.importorskip("vllm")
    p = _tf("up", "--params", _fleet(tmp_path), "--engine", "vllm", "--model", "embedded", "--seconds", "1",
            timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert len(p.stdout.splitlines()) <= 3, p.stdout
    lines = p.stderr.splitlines()
    ready = [x for x in lines if re.search(r"\]: ready\b", x)]
    assert len(ready) == 1, p.stderr
    assert "vllm engine loaded, model embedded" in ready[0]
    before = lines[: lines.index(ready[0])]
    assert len(before) <= 6, before
    assert any("vLLM engine loaded" in x for x in before)  # the engine's own line, through rclpy
    assert not _foreign_info(lines), _foreign_info(lines)
    assert not any("Initializing a V1 LLM engine" in x or "tcmalloc" in x for x in lines)


def test_paper_progress_lines_on_stderr_report_on_stdout(tmp_path):
    p = _tf("paper", "--quick", "--out", str(tmp_path / "p"), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    prog = re.findall(r"^\[paper (\d+)/(\d+)\] .+: done in [\d.]+ s", p.stderr, re.M)
    assert len(prog) >= 5 and [int(i) for i, _n in prog] == list(range(1, len(prog) + 1)), p.stderr
    assert prog[-1][0] == prog[-1][1]
    assert "[paper" not in p.stdout and "wrote" in p.stdout
    assert "\r" not in p.stderr  # lines, not a redrawn bar (stderr is not a terminal here)


def test_compare_progress_line_per_experiment(tmp_path):
    """`compare` runs minutes: the real command with its experiments replaced by instant fakes
    prints one line per experiment on stderr, as it finishes."""
    p = _python(f"""
        import sys
        from timely_tools.evaluation import compare as C
        C.trail_ltr = lambda quick, seed=0: {{"fake": 1}}
        C.lamps = lambda quick, seed=0: {{"fake": 1}}
        C.hybrid = lambda quick, mip_seconds, seed=0: {{"fake": 1}}
        C.wid_one = lambda w, quick, seeds: []
        C.figure = lambda *a, **k: None
        C.render = lambda R, fig: "report"
        C.format_table = lambda res: "table"
        from llm_planner_node.cli import main
        sys.exit(main(["compare", "--quick", "--out", {str(tmp_path / "c")!r}]))
    """)
    assert p.returncode == 0, p.stderr
    prog = re.findall(r"^\[compare (\d)/6\] (.+): done in [\d.]+ s", p.stderr, re.M)
    assert [int(i) for i, _ in prog] == [1, 2, 3, 4, 5, 6], p.stderr
    assert [label.split(" ")[0] for _, label in prog][-3:] == ["WID1,", "WID2,", "WID3,"]
    assert "[compare" not in p.stdout and "wrote" in p.stdout
    assert (tmp_path / "c" / "report.md").read_text() == "report"
    quiet = _python(p.args[2].replace('"--quick",', '"--quick", "--no-progress",'))
    assert quiet.returncode == 0 and "[compare" not in quiet.stderr, quiet.stderr
