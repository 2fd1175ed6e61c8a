"""The benches' child processes: each in a session of its own (its process group is its pid),
its output in a log file, stopped as a group with nothing of it left behind."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import IO, Sequence


class BenchProcess(subprocess.Popen):
    """A bench's child: ``cmd`` in its own session, its output (stdout and stderr; only stderr
    with ``pipe_stdout``, stdout then a pipe to the bench, as stdin with ``pipe_stdin``) in
    ``log_path``, closed by :func:`stop_process`."""

    def __init__(self, cmd: Sequence[str], log_path: Path, *, env: dict[str, str] | None = None,
                 pipe_stdin: bool = False, pipe_stdout: bool = False) -> None:
        self.log_path = Path(log_path)
        self.log_file: IO[bytes] = open(self.log_path, "wb")  # noqa: SIM115 - closed with the process (stop_process)
        super().__init__(list(cmd), stdin=subprocess.PIPE if pipe_stdin else None,
                         stdout=subprocess.PIPE if pipe_stdout else self.log_file,
                         stderr=self.log_file if pipe_stdout else subprocess.STDOUT, start_new_session=True, env=env)

    def log_text(self) -> str:
        """What the process wrote to its log so far ("" if it cannot be read)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


def start_process(cmd: Sequence[str], log_path: Path, *, env: dict[str, str] | None = None, pipe_stdin: bool = False,
          pipe_stdout: bool = False) -> BenchProcess:
    """Start ``cmd`` as a :class:`BenchProcess`."""
    return BenchProcess(cmd, log_path, env=env, pipe_stdin=pipe_stdin, pipe_stdout=pipe_stdout)


def session_members(sid: int) -> list[int]:
    """Processes of session ``sid`` (Linux /proc), by id."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and fields[3] == str(sid):
            out.append(int(d.name))
    return out


def signal_group(p: subprocess.Popen | None, sig: int) -> None:
    """Signal the process group of ``p`` (started in a session of its own); once its leader is
    gone, what the session left behind (e.g. vLLM's engine core)."""
    if p is None:
        return
    if p.poll() is None:
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        return
    for pid in session_members(p.pid):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_process(p: subprocess.Popen | None, sig: int = signal.SIGINT, wait_s: float = 10.0) -> int | None:
    """SIGCONT (a stopped process must hear the rest) and ``sig`` to the process group, wait up
    to ``wait_s``, then SIGKILL what is left of the session; the process's exit status."""
    if p is None:
        return None
    if p.poll() is None:
        signal_group(p, signal.SIGCONT)
        signal_group(p, sig)
        try:
            p.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
    signal_group(p, signal.SIGKILL)  # stragglers of the group, if any
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    f = getattr(p, "log_file", None)
    if f is not None and not f.closed:
        f.close()
    return p.returncode
