"""Python commands started from a warm process: forked from one that has already imported torch,
Lightning and normzoo, instead of a fresh interpreter importing them again (about 6 s of CPU a
command on the 2-core CI machine, most of what a tiny ``normzoo train`` costs).

    done = warm.run([sys.executable, "-m", "normzoo", "train", ...], cwd=..., env=...)
    live = warm.Popen([sys.executable, "tests/crash.py", "pause", "12", ...], cwd=..., env=...)

Each command is still a process of its own (its own pid, its own run-directory lock, killed by
a real SIGKILL): only the imports are done before the fork. It runs as ``python -m MODULE`` or
``python SCRIPT`` would (``__main__``, ``sys.argv``, ``sys.path[0]``, its working directory and
environment, stdin from ``/dev/null``, exit status, atexit hooks, a negative return code when a
signal ends it). The warm process starts with the first command's environment; a command whose
environment differs from it in more than the variables a command reads as it runs (``RUNTIME``:
an import may read any other, as ``OMP_NUM_THREADS`` or ``HF_HUB_OFFLINE`` are) gets a new warm
process. A command that is not ``sys.executable`` running a script or a module runs in a fresh
interpreter as before.

The warm process (this file run as a script) reads one request a line from stdin, forks, and
answers the child's pid; when a child ends it writes the child's return code to the request's
status file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PRELOAD = ("torch", "lightning.pytorch", "normzoo.cli", "normzoo.run.training",
           "normzoo.tasks.translation.module", "normzoo.tasks.lm.module")
# Read by normzoo (and Lightning's SLURM detection) only as a command runs: a forked child can
# take another value of these than its warm process had. Any other may be read at import.
RUNTIME = ("NORMZOO_CACHE", "PATH", "PYTEST_CURRENT_TEST")


def _startup(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in RUNTIME and not k.startswith("SLURM_")}


# -- the warm process -------------------------------------------------------------------------

def _child(request: dict) -> None:
    """In the forked child: become the requested command, and end as its process would."""
    import atexit
    import runpy
    import threading
    import traceback

    code: int = 0
    interrupted = False
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(out, fd)
            os.close(out)
        args = request["args"]
        if args[0] == "-m":
            sys.argv = ["-m", *args[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(args)
            sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            code = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        interrupted = True
    except BaseException:
        traceback.print_exc()
        code = 1
    # What the interpreter does on its way out: join threads, atexit hooks, flush.
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        if interrupted:  # an unhandled KeyboardInterrupt ends a process by SIGINT
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code)


def _serve() -> None:
    import importlib
    import select

    for name in PRELOAD:
        importlib.import_module(name)
    replies = sys.stdout
    print("ready", file=replies, flush=True)
    running: dict[int, str] = {}
    requests = sys.stdin.buffer
    listening = True
    while listening or running:  # once stdin is closed, until the last child has ended
        if listening and select.select([requests], [], [], 0.02)[0]:
            line = requests.readline()
            if line:
                request = json.loads(line)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(request)
                running[pid] = request["status"]
                print(pid, file=replies, flush=True)
            listening = bool(line)
        elif not listening:
            time.sleep(0.02)
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            path = running.pop(pid)
            Path(f"{path}.tmp").write_text(str(os.waitstatus_to_exitcode(status)))
            os.replace(f"{path}.tmp", path)


# -- the client ---------------------------------------------------------------------------------

class _Server:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = _startup(env)
        self.process = subprocess.Popen(
            [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            env=env, cwd=Path(__file__).parent, text=True)
        assert self.process.stdout is not None
        assert self.process.stdout.readline() == "ready\n", "the warm process did not start"
        self.count = 0

    def start(self, args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, Path]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.count += 1
        base = _FOLDER / f"{self.process.pid}-{self.count}"
        request = {"args": args, "cwd": str(cwd), "env": env, "stdout": f"{base}.out",
                   "stderr": f"{base}.err", "status": f"{base}.status"}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        pid = self.process.stdout.readline()
        assert pid, f"the warm process ended (exit status {self.process.wait()})"
        return int(pid), base

    def close(self) -> None:
        """Let it go: it ends by itself once its children have."""
        if self.process.stdin:
            self.process.stdin.close()


_server: _Server | None = None
_FOLDER = Path(tempfile.gettempdir()) / f"normzoo-warm-{os.getpid()}"  # the commands' output


def _close() -> None:
    if _server is not None:
        _server.close()


def _at_exit() -> None:
    _close()
    shutil.rmtree(_FOLDER, ignore_errors=True)


def _warm_args(args: list[str], env: dict[str, str]) -> list[str] | None:
    """``args`` as the warm process runs them, or None where only a fresh interpreter can."""
    if len(args) < 2 or args[0] != sys.executable or \
            (args[1].startswith("-") and args[1] != "-m"):
        return None
    global _server
    if _server is None or _server.env != _startup(env):
        if _server is None:
            import atexit

            _FOLDER.mkdir(exist_ok=True)
            atexit.register(_at_exit)
        _close()
        _server = _Server(env)
    return args[1:]


class Popen:
    """A command's process, forked warm where it can be: the part of ``subprocess.Popen`` the
    tests use (text output, always captured)."""

    def __init__(self, args: list[str], cwd: Path | str, env: dict[str, str]) -> None:
        self.args, self.returncode = args, None
        self._fresh: subprocess.Popen | None = None
        warm = _warm_args(args, env)
        if warm is None:
            self._fresh = subprocess.Popen(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                           text=True)
            self.pid = self._fresh.pid
            return
        assert _server is not None
        self.pid, self._base = _server.start(warm, Path(cwd), env)

    def poll(self) -> int | None:
        if self._fresh is not None:
            self.returncode = self._fresh.poll()
        elif self.returncode is None:
            status = Path(f"{self._base}.status")
            if status.exists():
                self.returncode = int(status.read_text())
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        if self._fresh is not None:
            out, err = self._fresh.communicate(timeout=timeout)
            self.returncode = self._fresh.returncode
            return out, err
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.01)
        out, err = (Path(f"{self._base}.{name}").read_text(errors="replace")
                    for name in ("out", "err"))
        for name in ("out", "err", "status"):
            Path(f"{self._base}.{name}").unlink()
        return out, err

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def run(args: list[str], cwd: Path | str, env: dict[str, str],
        timeout: float | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
    timeout=timeout)``, forked warm where it can be."""
    process = Popen(args, cwd, env)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(args, process.returncode, out, err)


if __name__ == "__main__":
    _serve()
