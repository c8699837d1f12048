"""Start ``python -m module args`` jobs by forking a server that has already imported
`processes.PRELOAD` (torch, torch._dynamo, gradcomp.evaluation: ~3-4 CPU s a fresh interpreter
spends before its first line), as the testbed does in each of its network namespaces; for jobs
that build no DDP model, `WITHOUT_DDP` (torch._dynamo, which DDP's constructor imports, is
about half the preload's CPU).

The server (``python -m gradcomp.evaluation.common.forkserver SOCKET MODULE...``) is started
with the environment and in the directory of the jobs it will serve (OMP_NUM_THREADS and the
like are read at import), imports the preload (the MODULEs), listens on a filesystem AF_UNIX
socket (a path socket: an abstract one would belong to one network namespace) and prints one
line when ready. A server for another network namespace is forked from a first one
(`Server.forked`: it joins the namespace as ``ip netns exec`` does, takes the environment and
serves; no interpreter's start, no imports, which read the first one's environment). Per job a
client sends argv, the environment and the working directory, and the job's stdout and stderr
as file descriptors; the server forks, answers the child's pid, and reports its wait status
when it ends. The child starts its own session (the caller signals process groups), takes the
environment, argv, directory and descriptors, draws fresh seeds for torch's and numpy's global
generators (a fresh interpreter's are random; Python's `random` reseeds itself after a fork) and
runs the module as ``python -m`` does, exiting as Python exits (SystemExit's code; an exception:
its traceback and 1). Its stdin is /dev/null, and `ps` shows it with the server's command line.
"""
from __future__ import annotations

import ctypes
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
    `preload`; it listens at `path`. `Server.forked` makes one without an interpreter's start."""

    def __init__(self, command: list[str], env: dict, cwd: str, path: Path, preload=PRELOAD):
        self.path, self.cwd = path, cwd
        self._log = path.with_suffix(".log")
        with open(self._log, "w") as log:
            self._proc = subprocess.Popen([*command, sys.executable, "-m", SERVER, str(path),
                                           *preload], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, stderr=log,
                                          start_new_session=True)
        self._out, self._ready = self._proc.stdout, False

    @classmethod
    def forked(cls, source: "Server", namespace: str, env: dict, path: Path) -> "Server":
        """A server forked from `source` (its preload imported already, in its directory) into
        the network namespace `namespace` (``ip netns``'s name) with `env`, listening at
        `path`: as if started there, less the interpreter's start and the preload's imports
        (read with the environment `source` started with)."""
        server = cls.__new__(cls)
        server.path, server.cwd, server._log = path, source.cwd, path.with_suffix(".log")
        read, write = os.pipe()  # its stdout, where it says "ready"
        server._out, server._ready = open(read, "rb"), False
        with open(server._log, "w") as log, open(write, "wb") as out:
            server._proc = source._request({"serve": str(path), "namespace": namespace,
                                            "env": env, "cwd": source.cwd}, out, log,
                                           [f"a fork server in {namespace}"])
        return server

    def start(self, argv: list[str], env: dict, stdout, stderr) -> Job:
        """Fork `argv` (``[sys.executable, "-m", module, ...]``) with `env` in the server's
        directory, writing to the open files `stdout` and `stderr`."""
        return self._request({"argv": argv[2:], "env": env, "cwd": self.cwd}, stdout, stderr,
                             argv)

    def _request(self, request: dict, stdout, stderr, args: list[str]) -> Job:
        for line in ([] if self._ready else self._out):  # the preload's time, once
            if line == b"ready\n":
                self._ready = True
                break
        if not self._ready:
            self._proc.wait()
            raise RuntimeError(f"the fork server at {self.path} exited with "
                               f"{self._proc.returncode}: {self._log.read_text()[-2000:]}")
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(str(self.path))
        socket.send_fds(conn, [json.dumps(request).encode()], [stdout.fileno(), stderr.fileno()])
        return Job(conn, args)

    def close(self) -> None:
        """Stop the server (its jobs are the caller's to stop)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self._proc.poll() is None:
                try:
                    os.kill(self._proc.pid, sig)
                except ProcessLookupError:  # ended, its status on the way
                    pass
                try:
                    self._proc.wait(3 if sig == signal.SIGTERM else None)
                except subprocess.TimeoutExpired:
                    continue
        self._out.close()


class ForkServers:
    """The servers of one owner (a testbed): one per network namespace, directory, environment
    and preload, started on first use, with their sockets in `directory`. The first of a
    directory, environment and preload starts afresh; the others are forked from it."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._servers: dict[tuple, Server] = {}

    def server(self, namespace: str, command: list[str], env: dict, cwd: str,
               preload=PRELOAD, rank_env: dict | None = None) -> Server:
        """The server of `namespace` for jobs with `env` in `cwd`: started with `command`
        (e.g. ``ip netns exec NAMESPACE env VAR=value ...``) as its prefix if it is the first
        of its kind, else forked from that first into `namespace` with `env` and `rank_env`
        (the variables `command` sets)."""
        kind = (cwd, tuple(sorted(env.items())), tuple(preload))
        if (namespace, kind) not in self._servers:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"{namespace}.{len(self._servers)}.sock"
            first = next((s for (_, k), s in self._servers.items() if k == kind), None)
            self._servers[namespace, kind] = (
                Server(command, env, cwd, path, preload) if first is None else
                Server.forked(first, namespace, {**env, **(rank_env or {})}, path))
        return self._servers[namespace, kind]

    def close(self) -> None:
        for server in reversed(self._servers.values()):  # the forked before their source
            server.close()
        self._servers.clear()


# -- the server ----------------------------------------------------------------------------
def serve(path: str, preload=PRELOAD) -> dict:
    """Import the modules of `preload`, listen at `path`, fork a child per request and report
    its status; returns only in a child, with its request (a job's argv, env, cwd; a forked
    server's also "serve" and "namespace")."""
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


CLONE_NEWNET, CLONE_NEWNS = 0x40000000, 0x00020000
MS_RDONLY, MS_REC, MS_SLAVE, MNT_DETACH = 1, 0x4000, 1 << 19, 2


def enter_namespace(name: str) -> None:
    """Join the network namespace `name` as ``ip netns exec`` does (iproute2's
    netns_switch): its network, and a mount namespace of this process's own whose /sys is
    that network's (its devices); there are no /etc/netns files to bind here."""
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            raise OSError(ctypes.get_errno(), f"{what} for network namespace {name}")

    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        check(libc.setns(fd, CLONE_NEWNET), "setns")
    finally:
        os.close(fd)
    check(libc.unshare(CLONE_NEWNS), "unshare")
    check(libc.mount(b"", b"/", b"none", ctypes.c_ulong(MS_SLAVE | MS_REC), None), "mount /")
    flags = 0
    if libc.umount2(b"/sys", MNT_DETACH) != 0 and os.statvfs("/sys").f_flag & os.ST_RDONLY:
        flags = MS_RDONLY  # overlaid: a read-only /sys cannot be shadowed read-write
    check(libc.mount(name.encode(), b"/sys", b"sysfs", ctypes.c_ulong(flags), None),
          "mount /sys")


def serve_forked(request: dict) -> dict:
    """In a child forked to be a server (`Server.forked`): join its namespace, take its
    environment and directory, and serve (`serve`, its preload imported already)."""
    enter_namespace(request["namespace"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    return serve(request["serve"], ())


def run_python(args: list) -> None:
    """Run ``python ARGS`` (``-m MODULE ...`` or ``SCRIPT ...``) in this process, e.g. a fork
    of a preloaded one, as a fresh interpreter would: its sys.argv and `__main__`, the first
    entry of sys.path (which it replaces) the working directory (-m) or the script's folder,
    and torch's and numpy's global generators freshly seeded (a fork's are its parent's;
    Python's `random` reseeds itself). Its SystemExit and exceptions are the caller's."""
    import runpy

    module = args[0] == "-m"
    sys.path[0] = os.getcwd() if module else os.path.dirname(os.path.abspath(args[0]))
    sys.argv = list(args[1:] if module else args)  # run_module sets argv[0] to its file
    if "torch" in sys.modules:
        sys.modules["torch"].seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if module:
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(args[0], run_name="__main__")


def run_request(request: dict) -> None:
    """Run a forked job's module (`run_python`) with its environment and directory."""
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    run_python(["-m", *request["argv"]])


if __name__ == "__main__":
    request = serve(sys.argv[1], sys.argv[2:])
    while "serve" in request:  # forked to be a server (`Server.forked`), then its job's child
        request = serve_forked(request)
    run_request(request)
