"""Running a command with a pseudo-terminal for standard output or standard input, as a person
at a terminal would (Linux and macOS): what normzoo prints, and how it reads, depends on it."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
import threading
import time
from dataclasses import dataclass


def _terminal() -> tuple[int, int]:
    """A pseudo-terminal 120 columns wide (a new one has 0, and tqdm draws nothing in 0)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    return leader, follower


@dataclass
class Finished:
    code: int
    stdout: str
    stderr: str


def _drain(fd: int, into: list[bytes]) -> None:
    """Read ``fd`` until the other side closes (EIO on Linux once the last writer is gone)."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return
        if not chunk:
            return
        into.append(chunk)


def run_with_terminal_stdout(command: list[str], env: dict[str, str],
                             timeout: float = 300) -> Finished:
    """``command`` with a terminal as standard output, a pipe as standard error."""
    leader, follower = _terminal()
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=follower,
                               stderr=subprocess.PIPE, env=env)
    os.close(follower)
    shown: list[bytes] = []
    reader = threading.Thread(target=_drain, args=(leader, shown), daemon=True)
    reader.start()
    try:
        _, err = process.communicate(timeout=timeout)
    finally:
        process.kill()
    reader.join(timeout=10)
    os.close(leader)
    return Finished(process.returncode, b"".join(shown).decode("utf-8", "replace"),
                    err.decode("utf-8", "replace"))


class TerminalInput:
    """``command`` reading a terminal (its standard input), writing to pipes: lines are typed
    one at a time, and what it answers is read as it comes."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.leader, follower = _terminal()
        self.process = subprocess.Popen(command, stdin=follower, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, env=env)
        os.close(follower)
        self.echo: list[bytes] = []  # the terminal echoes what is typed: read, and ignored
        threading.Thread(target=_drain, args=(self.leader, self.echo), daemon=True).start()
        self.err: list[bytes] = []
        threading.Thread(target=_drain, args=(self.process.stderr.fileno(), self.err),
                         daemon=True).start()
        self._pending = b""

    def type(self, line: str) -> None:
        os.write(self.leader, line.encode() + b"\n")

    def read_line(self, timeout: float) -> str | None:
        """The next line of standard output, or None if none came within ``timeout`` s."""
        out = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                return None
            chunk = os.read(out, 65536)
            if not chunk:
                return None
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode("utf-8", "replace")

    def end(self, timeout: float = 120) -> Finished:
        """Type end of input (Ctrl-D) and wait for the command to finish."""
        os.write(self.leader, b"\x04")
        try:
            rest = self.process.stdout.read()
            self.process.wait(timeout=timeout)
        finally:
            self.process.kill()
            os.close(self.leader)
        time.sleep(0.1)  # the stderr reader's last chunk
        return Finished(self.process.returncode,
                        (self._pending + rest).decode("utf-8", "replace"),
                        b"".join(self.err).decode("utf-8", "replace"))
