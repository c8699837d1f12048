"""A bandwidth-emulated cluster on one Linux machine: one network namespace per worker, joined
by veth links whose rate a token-bucket filter (tc ``tbf``) limits, so that real DDP jobs run
at a controlled bandwidth without a cluster. Needs root and iproute2 (`ip`, `tc`).

Topologies:

* ``star`` (any number of workers): each namespace's veth ends on a bridge in the root
  namespace; a per-link rate (`rates`, one per worker) gives heterogeneous set-ups;
* ``p2p`` (2 workers): one veth pair straight between the two namespaces.

Every link is shaped on its sending side in both directions (the namespace's end and the
bridge's end), so a worker's link carries `rate` each way, like a full-duplex NIC;
`Testbed.set_rate` changes it while jobs run (a network that degrades mid-run). The kernel
here has no netem: latency cannot be added; it is what the machine gives (tens of us).

Names are unique to the run: ``gctb<6 hex>`` starts every namespace (``gctb<id>-<rank>``),
bridge (``gctb<id>b``) and veth (``gctb<id>h<rank>`` on the bridge, ``gctb<id>n<rank>`` in the
namespace), so two runs never collide. A run writes its owner's pid to
``/run/gradcomp-testbed/<id>`` before creating anything; `Testbed` tears everything down on
normal exit, on an exception, on Ctrl-C (SIGINT) and on SIGTERM, and `cleanup_stale()` removes
what a killed run (SIGKILL) left behind: every run whose owner is gone.

Jobs: `Testbed.run(argv)` starts `argv` once per namespace (rank = namespace index) with the
variables torch.distributed's ``env://`` and gloo need (RANK, WORLD_SIZE, LOCAL_RANK=0,
LOCAL_WORLD_SIZE=1, MASTER_ADDR = rank 0's address, MASTER_PORT, GLOO_SOCKET_IFNAME = the
namespace's veth, OMP_NUM_THREADS = `threads`, GRADCOMP_TESTBED_RATE_BPS = its link's rate),
waits for all, and stops the others as soon as one fails. A torchrun job is started as
``torchrun --nnodes N --nproc-per-node 1 --node-rank $RANK --master-addr $MASTER_ADDR
--master-port $MASTER_PORT ...`` through ``sh -c``. A module job, ``[sys.executable, "-m",
module, ...]``, is forked from its namespace's fork server (`common.forkserver`: one per
namespace, from the first such job to the testbed's end, with the rank's environment and
`preload` imported (`forkserver.WITHOUT_DDP`: no DDP), namespace 0's started, the others forked
from it), as a fresh interpreter runs it less ~3 s of imports; other commands start as above
(all: `fork` = False, or GRADCOMP_FORK_JOBS=0). Ranks sharing a namespace: `nodes`.
"""
from __future__ import annotations

import math
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ...checks import check_number
from ..common.forkserver import PRELOAD, ForkServers, fork_enabled, forkable
from ..common.store import write_atomic
from ..common.units import format_rate, parse_rate

PREFIX = "gctb"
REGISTRY = Path("/run/gradcomp-testbed")
SOCKETS = REGISTRY / "forkservers"  # a run's fork server sockets: SOCKETS/<run id>/
TOPOLOGIES = ("star", "p2p")
SUBNET = "10.213.0"
MAX_WORKERS = 99


class TestbedUnavailable(RuntimeError):
    """The testbed cannot run here (not root, or `ip` / `tc` missing)."""


class JobFailed(RuntimeError):
    """A job in the testbed exited with an error; `results` holds every rank's outcome."""

    def __init__(self, message: str, results: list):
        super().__init__(message)
        self.results = results


def unavailable_reason() -> str | None:
    """Why the testbed cannot run here, or None when it can."""
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"the testbed needs iproute2: {' and '.join(missing)} not found on PATH"
    if os.geteuid() != 0:
        return ("the testbed needs root privileges (network namespaces, veth links, tc "
                "qdiscs); run as root, e.g. with sudo")
    return None


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done


def tbf_burst_bytes(rate_bps: float, mtu: int) -> int:
    """The token bucket's size: 1 ms at the rate, at least two MTU-sized packets and 16 KiB,
    so the burst a sender gets after idling stays small against the messages sent."""
    return int(max(rate_bps / 8 * 1e-3, 2 * (mtu + 14), 16 * 1024))


@dataclass(frozen=True)
class Link:
    """One worker's link: its namespace, interface (inside), address and rate (bit/s)."""

    rank: int
    namespace: str
    interface: str
    address: str
    rate_bps: float


@dataclass
class RankResult:
    rank: int
    returncode: int
    stdout: str
    stderr: str


def _check_options(workers, rates, topology, threads, mtu) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int) \
            or not 2 <= workers <= MAX_WORKERS:
        raise ValueError(f"workers={workers!r} is not allowed: it must be an integer in "
                         f"[2, {MAX_WORKERS}]")
    if topology not in TOPOLOGIES:
        raise ValueError(f"topology={topology!r} is not allowed: choose one of "
                         f"{', '.join(map(repr, TOPOLOGIES))}")
    if topology == "p2p" and workers != 2:
        raise ValueError(f"topology='p2p' is one link between 2 workers; workers={workers} "
                         "needs topology='star'")
    if len(rates) != workers:
        raise ValueError(f"rates={rates!r} is not allowed: give one rate per worker "
                         f"({workers})")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads={threads!r} is not allowed: it must be an integer >= 1")
    if isinstance(mtu, bool) or not isinstance(mtu, int) or not 576 <= mtu <= 65535:
        raise ValueError(f"mtu={mtu!r} is not allowed: it must be an integer in [576, 65535]")


class Testbed:
    """`workers` namespaces joined at `rate` (bit/s or "1gbit"; `rates`: one per worker
    instead) by a `topology` ("star" or "p2p"); a context manager (see the module
    docstring). `threads`: OMP_NUM_THREADS of each job's process."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, workers: int = 2, rate="1gbit", rates=None, topology: str = "star",
                 threads: int = 1, mtu: int = 9000, port: int = 29500):
        rates = [rate] * workers if rates is None and isinstance(workers, int) \
            and not isinstance(workers, bool) else list(rates or [])
        _check_options(workers, rates, topology, threads, mtu)
        self.workers, self.topology, self.threads, self.mtu = workers, topology, threads, mtu
        self.port = port
        self.run_id = f"{PREFIX}{secrets.token_hex(3)}"
        self.links = [Link(r, f"{self.run_id}-{r}", f"{self.run_id}n{r}",
                           f"{SUBNET}.{r + 1}", parse_rate(v, "rate"))
                      for r, v in enumerate(rates)]
        self._procs: list = []  # subprocess.Popen or forkserver.Job
        self.fork = fork_enabled()  # GRADCOMP_FORK_JOBS (forkserver)
        self.preload = PRELOAD  # what the fork servers import before forking module jobs
        self._servers = ForkServers(SOCKETS / self.run_id)
        self._old_handlers: dict = {}
        self._up = False

    def __repr__(self) -> str:
        rates = ", ".join(format_rate(link.rate_bps) for link in self.links)
        return f"Testbed({self.run_id}, {self.topology}, {self.workers} workers at {rates})"

    @property
    def bridge(self) -> str:
        return f"{self.run_id}b"

    @property
    def processes(self) -> int:
        """How many processes `run` starts: one per namespace."""
        return self.workers

    def link_of(self, process: int) -> Link:
        """The link (and namespace) process `process` of `run` runs behind."""
        return self.links[process]

    def _host_end(self, rank: int) -> str:
        return f"{self.run_id}h{rank}"

    # -- life cycle ------------------------------------------------------------------------
    def __enter__(self) -> "Testbed":
        reason = unavailable_reason()
        if reason:
            raise TestbedUnavailable(reason)
        self._catch_signals()
        try:
            REGISTRY.mkdir(parents=True, exist_ok=True)
            write_atomic(REGISTRY / self.run_id, str(os.getpid()))  # never seen empty
            self._up = True
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _catch_signals(self) -> None:
        """SIGTERM (and SIGHUP) raise SystemExit, so that `close` runs as on Ctrl-C."""
        import threading

        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[sig] = signal.signal(sig, _raise_exit)

    def _create(self) -> None:
        for link in self.links:
            _sh("ip", "netns", "add", link.namespace)
            _sh("ip", "-n", link.namespace, "link", "set", "lo", "up")
        if self.topology == "star":
            _sh("ip", "link", "add", self.bridge, "type", "bridge")
            _sh("ip", "link", "set", self.bridge, "mtu", str(self.mtu), "up")
            for link in self.links:
                host = self._host_end(link.rank)
                _sh("ip", "link", "add", host, "mtu", str(self.mtu), "type", "veth", "peer",
                    "name", link.interface, "mtu", str(self.mtu), "netns", link.namespace)
                _sh("ip", "link", "set", host, "master", self.bridge, "up")
                self._shape(None, host, link.rate_bps)
        else:
            a, b = self.links
            _sh("ip", "link", "add", a.interface, "mtu", str(self.mtu), "netns", a.namespace,
                "type", "veth", "peer", "name", b.interface, "mtu", str(self.mtu), "netns",
                b.namespace)
        for link in self.links:
            _sh("ip", "-n", link.namespace, "addr", "add", f"{link.address}/24", "dev",
                link.interface)
            _sh("ip", "-n", link.namespace, "link", "set", link.interface, "up")
            self._shape(link.namespace, link.interface, link.rate_bps)

    def _shape(self, namespace: str | None, device: str, rate_bps: float,
               action: str = "add") -> None:
        where = ("-n", namespace) if namespace else ()
        _sh("tc", *where, "qdisc", action, "dev", device, "root", "tbf", "rate",
            f"{int(rate_bps)}bit", "burst", str(tbf_burst_bytes(rate_bps, self.mtu)),
            "latency", "100ms")

    def set_rate(self, rate, rank: int | None = None) -> None:
        """Change the rate of `rank`'s link (None: every link) to `rate` (bit/s or "100mbit"),
        in both directions, while jobs may be running (e.g. from a `threading.Timer` during
        `run`), so that a job sees its network change under it."""
        rate_bps = parse_rate(rate, "rate")
        if rank is not None and (isinstance(rank, bool) or rank not in range(self.workers)):
            raise ValueError(f"rank={rank!r} is not allowed: choose None (every link) or a "
                             f"worker in [0, {self.workers - 1}]")
        if not self._up:
            raise RuntimeError("set_rate needs a testbed that is up: use it inside `with`")
        for r in range(self.workers) if rank is None else [rank]:
            link = self.links[r] = replace(self.links[r], rate_bps=rate_bps)
            if self.topology == "star":
                self._shape(None, self._host_end(r), rate_bps, "change")
            self._shape(link.namespace, link.interface, rate_bps, "change")

    def close(self) -> None:
        """Stop the jobs, delete the links, bridge and namespaces (qdiscs go with their
        devices); safe to call twice."""
        self._stop_jobs()
        self._servers.close()
        if self._up:
            _remove_run(self.run_id)
            self._up = False
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()

    # -- jobs ------------------------------------------------------------------------------
    def environment(self, rank: int, port: int | None = None) -> dict[str, str]:
        """The variables a rank's process gets."""
        link = self.links[rank]
        return {"RANK": str(rank), "WORLD_SIZE": str(self.workers), "LOCAL_RANK": "0",
                "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": str(rank),
                "MASTER_ADDR": self.links[0].address,
                "MASTER_PORT": str(self.port if port is None else port),
                "GLOO_SOCKET_IFNAME": link.interface, "OMP_NUM_THREADS": str(self.threads),
                "GRADCOMP_TESTBED_RATE_BPS": repr(link.rate_bps)}

    def command(self, rank: int, argv, port: int | None = None) -> list[str]:
        """`argv` wrapped to run in rank's namespace with its environment."""
        env = [f"{k}={v}" for k, v in self.environment(rank, port).items()]
        return ["ip", "netns", "exec", self.link_of(rank).namespace, "env", *env, *argv]

    def run(self, argv, timeout: float | None = None, env: dict | None = None,
            cwd=None, check: bool = True) -> list[RankResult]:
        """Run `argv` in every namespace at once; return each rank's exit code and output.
        `check`: raise JobFailed when a rank fails (the others are stopped then)."""
        if not self._up:
            raise RuntimeError("the testbed is not set up: use it as a context manager")
        port = self.port + secrets.randbelow(2000)
        full_env = {**os.environ, **(env or {})}
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        with tempfile.TemporaryDirectory() as tmp:
            logs = [(open(os.path.join(tmp, f"{r}.out"), "w+"),
                     open(os.path.join(tmp, f"{r}.err"), "w+")) for r in range(self.processes)]
            try:
                servers = self._fork_servers(list(argv), port, full_env, cwd)
                try:
                    for r, (out, err) in enumerate(logs):  # one by one: all are stopped
                        self._procs.append(servers[r].start(
                            list(argv), {**full_env, **self.environment(r, port)}, out, err)
                            if servers else subprocess.Popen(
                                self.command(r, list(argv), port), env=full_env, cwd=cwd,
                                stdout=out, stderr=err, start_new_session=True))
                    failed = self._wait(deadline)
                finally:
                    self._stop_jobs()
                results = []
                for r, (p, (out, err)) in enumerate(zip(self._procs, logs)):
                    out.seek(0)
                    err.seek(0)
                    results.append(RankResult(r, p.returncode, out.read(), err.read()))
            finally:
                self._procs = []
                for out, err in logs:
                    out.close()
                    err.close()
        if check and failed is not None:
            bad = results[failed]
            raise JobFailed(f"rank {failed} exited with {bad.returncode}: "
                            f"{bad.stderr.strip()[-2000:]}", results)
        return results

    def _fork_servers(self, argv, port: int, env: dict, cwd) -> list:
        """Per process, its namespace's fork server (started at once) for module jobs."""
        return [self._servers.server(self.link_of(r).namespace, self.command(r, [], port),
                                     env, os.path.abspath(cwd or os.getcwd()), self.preload,
                                     self.environment(r, port))
                for r in range(self.processes)] if self.fork and forkable(argv) else []

    def _wait(self, deadline: float) -> int | None:
        """Wait until all exit (None) or one fails (its rank); TimeoutError past deadline."""
        while True:
            codes = [p.poll() for p in self._procs]
            for rank, code in enumerate(codes):
                if code not in (None, 0):
                    return rank
            if all(code == 0 for code in codes):
                return None
            if time.monotonic() > deadline:
                raise TimeoutError("the testbed job did not finish in time")
            time.sleep(0.02)

    def _stop_jobs(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                _signal_group(p.pid, signal.SIGTERM)
        end = time.monotonic() + 3
        for p in self._procs:
            try:
                p.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(p.pid, signal.SIGKILL)
                p.wait()


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


def _signal_group(pid: int, sig) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _remove_run(run_id: str) -> None:
    """Delete everything named after `run_id`: processes left in its namespaces, its veths
    (deleting one end deletes both), bridge and namespaces, and its registry entry."""
    for ns in _namespaces(run_id):
        pids = _sh("ip", "netns", "pids", ns, check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    for name in _links(run_id):
        _sh("ip", "link", "del", name, check=False)
    for ns in _namespaces(run_id):
        _sh("ip", "netns", "del", ns, check=False)
    shutil.rmtree(SOCKETS / run_id, ignore_errors=True)
    (REGISTRY / run_id).unlink(missing_ok=True)


def _namespaces(prefix: str) -> list[str]:
    out = _sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.split() and line.split()[0].startswith(prefix)]


def _links(prefix: str) -> list[str]:
    """Root-namespace links named with `prefix`, host veth ends before bridges."""
    out = _sh("ip", "-o", "link", "show", check=False).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()
             if ":" in line]
    return sorted((n for n in names if n.startswith(prefix)), key=lambda n: n.endswith("b"))


def leftovers(prefix: str = PREFIX) -> dict[str, list[str]]:
    """What exists with `prefix` now: namespaces, root-namespace links and qdiscs on them."""
    links = _links(prefix)
    qdiscs = [f"{n}: {line}" for n in links for line in
              _sh("tc", "qdisc", "show", "dev", n, check=False).stdout.splitlines()
              if "tbf" in line]
    return {"namespaces": _namespaces(prefix), "links": links, "qdiscs": qdiscs}


def _owner_alive(run_id: str) -> bool:
    try:
        pid = int((REGISTRY / run_id).read_text())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale(prefix: str = PREFIX) -> list[str]:
    """Remove the leftovers of runs whose owner process is gone (killed runs); runs still
    owned by a live process are kept. Returns the run ids removed."""
    reason = unavailable_reason()
    if reason:
        raise TestbedUnavailable(reason)
    found = {ns.rsplit("-", 1)[0] for ns in _namespaces(prefix)}
    found |= {n[:len(PREFIX) + 6] for n in _links(prefix)}
    if REGISTRY.exists():
        found |= {p.name for p in REGISTRY.iterdir() if p.name.startswith(prefix)}
    stale = sorted(run for run in found if not _owner_alive(run))
    for run in stale:
        _remove_run(run)
    return stale


def run_command(argv, workers: int = 2, rate="1gbit", rates=None, topology: str = "star",
                threads: int = 1, timeout: float | None = None) -> list[RankResult]:
    """Run `argv` once per namespace of a fresh testbed (module docstring) and tear it down;
    each rank's exit code and output (a failing rank raises JobFailed)."""
    if not argv:
        raise ValueError("command=[] is not allowed: give the command to run in every "
                         "namespace")
    if timeout is not None:
        check_number(timeout, "timeout", 0, above=True)
    with Testbed(workers, rate, rates, topology, threads) as testbed:
        return testbed.run(list(argv), timeout=timeout)
