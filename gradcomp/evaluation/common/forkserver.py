"""Start ``python -m module args`` jobs by forking a server that has already imported
`processes.PRELOAD` (torch, torch._dynamo, gradcomp.evaluation: ~3-4 CPU s a fresh interpreter
spends before its first line), as the testbed does in each of its network namespaces; for jobs
that build no DDP model, `WITHOUT_DDP` (torch._dynamo, which DDP's constructor imports, is
about half the preload's CPU).

The server (``python -m gradcomp.evaluation.common.forkserver SOCKET MODULE...``) is started with the
environment and in the directory of the jobs it will serve (OMP_NUM_THREADS and the like are
read at import), imports the preload (the MODULEs), listens on a filesystem AF_UNIX socket (a path socket: an
abstract one would belong to one network namespace) and prints one line when ready. Per job a
client sends argv, the environment and the working directory, and the job's stdout and stderr
as file descriptors; the server forks, answers the child's pid, and reports its wait status
when it ends. The child starts its own session (the caller signals process groups), takes the
environment, argv, directory and descriptors, draws fresh seeds for torch's and numpy's global
generators (a fresh interpreter's are random; Python's `random` reseeds itself after a fork) and
runs the module as ``python -m`` does, exiting as Python exits (SystemExit's code; an exception:
its traceback and 1). Its stdin is /dev/null, and `ps` shows it with the server's command line.
"""
from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

from .processes import PRELOAD

SERVER = "gradcomp.evaluation.common.forkserver"
MAX_MESSAGE = 1 << 20  # the request's bytes: argv, environment and directory as JSON
#: The preload of servers whose jobs build no DDP model (e.g. collectives alone).
WITHOUT_DDP = tuple(name for name in PRELOAD if name != "torch._dynamo")


def forkable(argv) -> bool:
    """Whether `argv` is ``[sys.executable, "-m", module, ...]``, a job a server can fork."""
    return len(argv) > 2 and argv[0] == sys.executable and argv[1] == "-m"


def fork_enabled() -> bool:
    """Whether module jobs are forked (GRADCOMP_FORK_JOBS=1, the default) or started in
    fresh interpreters (0), e.g. to compare the two."""
    value = os.environ.get("GRADCOMP_FORK_JOBS", "1")
    if value not in ("0", "1"):
        raise ValueError(f"GRADCOMP_FORK_JOBS={value!r} is not allowed: choose 1 (module jobs "
                         "forked from a preloaded server, the default) or 0 (fresh "
                         "interpreters)")
    return value == "1"


class Job:
    """A forked job, seen by its client as a `subprocess.Popen`: pid, poll, wait, returncode.
    A job whose server ended without reporting it counts as failed (1)."""

    def __init__(self, conn: socket.socket, args: list[str]):
        self.args, self._conn, self.returncode = args, conn, None
        reply = conn.recv(64)
        if not reply:
            conn.close()
            raise RuntimeError(f"the fork server did not start {' '.join(args)}")
        self.pid = int(reply)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                status = self._conn.recv(64, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            self.returncode = os.waitstatus_to_exitcode(int(status)) if status else 1
            self._conn.close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            select.select([self._conn], [], [], timeout)
            if self.poll() is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode


class Server:
    """One fork server (client side): `command` starts it (a prefix such as ``ip netns exec
    NS env ...`` then the server's own argv), with `env`, in `cwd`, importing the modules of
    `preload`; it listens at `path`."""

    def __init__(self, command: list[str], env: dict, cwd: str, path: Path, preload=PRELOAD):
        self.path, self.cwd = path, cwd
        self._log = path.with_suffix(".log")
        with open(self._log, "w") as log:
            self._proc = subprocess.Popen([*command, sys.executable, "-m", SERVER, str(path),
                                           *preload], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, stderr=log,
                                          start_new_session=True)
        self._ready = False

    def start(self, argv: list[str], env: dict, stdout, stderr) -> Job:
        """Fork `argv` (``[sys.executable, "-m", module, ...]``) with `env` in the server's
        directory, writing to the open files `stdout` and `stderr`."""
        for line in ([] if self._ready else self._proc.stdout):  # the preload's time, once
            if line == b"ready\n":
                self._ready = True
                break
        if not self._ready:
            self._proc.wait()
            raise RuntimeError(f"the fork server at {self.path} exited with "
                               f"{self._proc.returncode}: {self._log.read_text()[-2000:]}")
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(str(self.path))
        request = json.dumps({"argv": argv[2:], "env": env, "cwd": self.cwd}).encode()
        socket.send_fds(conn, [request], [stdout.fileno(), stderr.fileno()])
        return Job(conn, argv)

    def close(self) -> None:
        """Stop the server (its jobs are the caller's to stop)."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(3)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc.stdout.close()


class ForkServers:
    """The servers of one owner (a testbed): one per namespace, directory, environment and
    preload, started on first use, with their sockets in `directory`."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._servers: dict[tuple, Server] = {}

    def server(self, place: str, command: list[str], env: dict, cwd: str,
               preload=PRELOAD) -> Server:
        """The server of `place` (e.g. a namespace) for jobs with `env` in `cwd`, started
        with `command` as its prefix if there is none yet (it preloads while others start)."""
        key = (place, cwd, tuple(sorted(env.items())), tuple(preload))
        if key not in self._servers:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"{place}.{len(self._servers)}.sock"
            self._servers[key] = Server(command, env, cwd, path, preload)
        return self._servers[key]

    def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()


# -- the server ----------------------------------------------------------------------------
def serve(path: str, preload=PRELOAD) -> dict:
    """Import the modules of `preload`, listen at `path`, fork a child per request and report
    its status; returns only in a child, with its request (argv, env, cwd)."""
    for name in preload:
        importlib.import_module(name)
    # the preload's objects out of the collector's sight (Python's gc.freeze docs: for a
    # server that forks): a child's collections, its exit's included, do not walk (and so
    # copy) them: a child's exit 0.6 CPU s instead of 2
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a child's end wakes the select
    print("ready", flush=True)
    jobs: dict[int, socket.socket] = {}
    while True:
        readable = select.select([listener, wake_r], [], [])[0]
        if wake_r in readable:
            os.read(wake_r, 512)
        _report_ended(jobs)
        if listener in readable:
            conn = listener.accept()[0]
            message, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 2)
            if len(fds) != 2:  # a client gone before its request
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for fd in (wake_r, wake_w, listener, conn, *jobs.values()):
                    os.close(fd) if isinstance(fd, int) else fd.close()
                os.setsid()
                os.dup2(fds[0], 1)
                os.dup2(fds[1], 2)
                os.close(fds[0])
                os.close(fds[1])
                return json.loads(message)
            for fd in fds:
                os.close(fd)
            _send(conn, pid)
            jobs[pid] = conn


def _report_ended(jobs: dict) -> None:
    while jobs:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        conn = jobs.pop(pid)
        _send(conn, status)
        conn.close()


def _send(conn: socket.socket, number: int) -> None:
    try:
        conn.send(str(number).encode())
    except OSError:  # the client went away; the job is reaped all the same
        pass


def run_request(request: dict) -> None:
    """Run a forked job's module as ``python -m`` would, in this (fresh-seeded) process."""
    import runpy

    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.path[0] = os.getcwd()  # ``python -m``'s first entry: the working directory
    sys.argv = list(request["argv"])  # [module, args...]; run_module sets argv[0] to its file
    sys.modules["torch"].seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    run_request(serve(sys.argv[1], sys.argv[2:]))
