"""The bandwidth-emulated testbed: real namespaces, veths, tbf qdiscs and processes (root)."""
import json
import multiprocessing
import os
import signal
import sys
import time

import pytest

from gradcomp.evaluation.common import processes
from gradcomp.evaluation.common.forkserver import WITHOUT_DDP
from gradcomp.evaluation.testbed import testbed
from gradcomp.evaluation.testbed.ratecheck import expected_allreduce_s
from gradcomp.evaluation.testbed.testbed import JobFailed, Testbed, cleanup_stale, leftovers

REASON = testbed.unavailable_reason()
needs_root = pytest.mark.skipif(REASON is not None, reason=REASON or "")

EMPTY = {"namespaces": [], "links": [], "qdiscs": []}
# A module job (forked from the namespace's server) that sleeps for a minute
SLEEP_MODULE = [sys.executable, "-m", "timeit", "-n", "1", "-r", "1",
                "__import__('time').sleep(60)"]
# A module job reporting how it was started, then ending as its argument for its rank says
PROBE = """import json, os, sys
preloaded = "torch" in sys.modules
print(json.dumps({"preloaded": preloaded, "dynamo": "torch._dynamo" in sys.modules,
                  "name": __name__, "argv": sys.argv,
                  "cwd": os.getcwd(), "path0": sys.path[0], "ppid": os.getppid(),
                  "leader": os.getpid() == os.getpgid(0) == os.getsid(0),
                  "net": os.readlink("/proc/self/ns/net"), "extra": os.environ["PROBE_EXTRA"],
                  "sys": sorted(os.listdir("/sys/class/net")),
                  "env": {k: os.environ[k] for k in ("RANK", "MASTER_PORT", "OMP_NUM_THREADS")},
                  "threads": sys.modules["torch"].get_num_threads() if preloaded else None}),
      flush=True)
what = sys.argv[1 + int(os.environ["RANK"])]
pid_file = os.environ["MASTER_PORT"] + ".pid"  # rank 0's pid in this run
if what.startswith(("after0-", "started0-")):  # once rank 0 has printed (and ended)
    while not os.path.exists(pid_file):
        __import__("time").sleep(0.01)
    while what.startswith("after0-") and os.path.exists(f"/proc/{open(pid_file).read()}"):
        __import__("time").sleep(0.01)
    what = what.split("-")[1]
elif os.environ["RANK"] == "0":
    with open(pid_file + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(pid_file + ".tmp", pid_file)
if what == "raise":
    raise ValueError("the probe failed")
if what == "sleep":
    __import__("time").sleep(60)
sys.exit(int(what) if what.isdigit() else what)
"""


def _sleep_job(tb):
    tb.run(["sleep", "60"])


def _sleep_module(tb):
    tb.run(SLEEP_MODULE)


def _server_and_jobs(run_id):
    """The live processes whose command line names `run_id`: its fork servers (their socket
    path does) and the jobs they forked (same command line)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if run_id.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _until_forked(run_id, count):
    """Wait until `count` processes (servers and their jobs) of `run_id` run."""
    end = time.monotonic() + 120
    while len(_server_and_jobs(run_id)) < count:
        assert time.monotonic() < end, "the fork servers and their jobs did not start"
        time.sleep(0.2)


def _hold(body, conn):
    # As from an interactive shell: SIGINT raises KeyboardInterrupt (a shell that starts the
    # suite as a background job hands every process below it SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with Testbed(2, "100mbit") as tb:
            tb.preload = WITHOUT_DDP  # the sleep builds no DDP model
            conn.send(tb.run_id)
            body(tb)
    except KeyboardInterrupt:  # SIGINT's, after the teardown (SIGTERM's: SystemExit)
        pass


def _holder(body):
    """A real process (forked from the fork server, which has imported gradcomp: no fresh
    interpreter's imports) that sets up a testbed, sends its run id and runs `body(tb)`
    inside: (the process, the end of the pipe its run id comes through)."""
    method = processes.start_method()
    if method == "forkserver":
        multiprocessing.set_forkserver_preload(processes.PRELOAD)
    context = multiprocessing.get_context(method)
    ours, theirs = context.Pipe()
    proc = context.Process(target=_hold, args=(body, theirs))
    proc.start()
    theirs.close()  # its end only: should it die first, recv raises EOFError
    return proc, ours


def test_bad_options_name_the_option(monkeypatch):
    with pytest.raises(ValueError, match="workers"):
        Testbed(1)
    with pytest.raises(ValueError, match="topology"):
        Testbed(2, topology="ring")
    with pytest.raises(ValueError, match="p2p"):
        Testbed(3, topology="p2p")
    with pytest.raises(ValueError, match="rates"):
        Testbed(3, rates=["1gbit", "1gbit"])
    with pytest.raises(ValueError, match="rate"):
        Testbed(2, "fast")
    with pytest.raises(ValueError, match="command"):
        testbed.run_command([])
    monkeypatch.setenv("GRADCOMP_FORK_JOBS", "yes")
    with pytest.raises(ValueError, match="GRADCOMP_FORK_JOBS='yes' is not allowed"):
        Testbed(2)


def test_without_root_a_clear_message(monkeypatch, capsys, tmp_path):
    # The check itself (an unprivileged user cannot run the venv's python here): seen as uid
    # 1000, the testbed refuses before touching anything, and the CLI says why, no traceback.
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(testbed.TestbedUnavailable, match="needs root privileges"):
        with Testbed(2):
            pass
    from gradcomp import cli

    for argv in (["testbed", "--", "true"], ["testbed", "--cleanup"], ["testbed", "--check"]):
        with pytest.raises(SystemExit, match="gradcomp testbed: the testbed needs root"):
            cli.main(argv)
    with pytest.raises(SystemExit, match="gradcomp validate: the testbed needs root"):
        cli.main(["validate", "--rates", "1gbit", "--methods", "none", "--model", "tiny",
                  "--out", str(tmp_path)])


def test_expected_allreduce_time_is_the_ring_cost():
    # 2(p-1)/p * S / B: 2 workers send the whole payload once each way.
    assert expected_allreduce_s(4e6, 2, 100e6) == pytest.approx(0.32)
    assert expected_allreduce_s(4e6, 4, 100e6) == pytest.approx(0.48)


@needs_root
def test_jobs_get_rank_addresses_and_shaped_links_and_leave_nothing():
    with Testbed(3, rates=["100mbit", "200mbit", "300mbit"]) as tb:
        qdiscs = leftovers(tb.run_id)["qdiscs"]
        results = tb.run(["sh", "-c", "echo $RANK $WORLD_SIZE $MASTER_ADDR $GLOO_SOCKET_IFNAME "
                          "$OMP_NUM_THREADS; ip -o -4 addr show dev $GLOO_SOCKET_IFNAME; "
                          "tc qdisc show dev $GLOO_SOCKET_IFNAME"])
        run_id = tb.run_id
    for r in results:
        rank, world, master, iface, threads = r.stdout.split("\n")[0].split()
        assert (int(rank), world, master, threads) == (r.rank, "3", "10.213.0.1", "1")
        assert iface == f"{run_id}n{r.rank}"
        assert f"10.213.0.{r.rank + 1}/24" in r.stdout
        assert f"rate {(r.rank + 1) * 100}Mbit" in r.stdout  # the namespace's sending side
    assert len(qdiscs) == 3 and all("tbf" in q for q in qdiscs)  # the bridge's sending side
    assert leftovers(run_id) == EMPTY


@needs_root
@pytest.mark.parametrize("topology", ["star", "p2p"])
def test_set_rate_changes_every_shaped_end_while_a_job_runs(topology):
    import threading

    with Testbed(2, "1gbit", topology=topology) as tb:
        show = ["sh", "-c", "tc qdisc show dev $GLOO_SOCKET_IFNAME; sleep 1.5; "
                "tc qdisc show dev $GLOO_SOCKET_IFNAME"]
        timer = threading.Timer(0.5, tb.set_rate, ["100mbit"])
        timer.start()
        results = tb.run(show)
        timer.join()
        tb.set_rate("300mbit", rank=1)
        bridge_side = leftovers(tb.run_id)["qdiscs"]
        with pytest.raises(ValueError, match="rank=2 is not allowed"):
            tb.set_rate("1gbit", rank=2)
        with pytest.raises(ValueError, match="rate"):
            tb.set_rate("fast")
        rates = [link.rate_bps for link in tb.links]
    for r in results:  # each namespace's sending side, before and during the job
        before, during = r.stdout.split("qdisc tbf")[1:]
        assert "rate 1Gbit" in before and "rate 100Mbit" in during, r.stdout
    assert rates == [100e6, 300e6]
    if topology == "star":  # the bridge's sending side follows
        assert sorted("300Mbit" in q for q in bridge_side) == [False, True], bridge_side


@needs_root
def test_p2p_link_carries_a_job_and_a_failing_rank_raises():
    with Testbed(2, "1gbit", topology="p2p") as tb:
        ok = tb.run([sys.executable, "-c", "import socket, os; s = socket.socket(); "
                     "s.connect((os.environ['MASTER_ADDR'], 1)) if os.environ['RANK'] == '1' "
                     "else None"], check=False)
        with pytest.raises(JobFailed, match="rank 1"):
            tb.run(["sh", "-c", 'test "$RANK" = 0 || exit 3'])
        run_id = tb.run_id
    # rank 1 reached rank 0's address over the link (port 1: refused, not unreachable)
    assert "ConnectionRefused" in ok[1].stderr, ok[1].stderr
    assert leftovers(run_id) == EMPTY


@needs_root
def test_an_exception_and_repeated_runs_leave_the_machine_clean():
    ids = []
    for _ in range(3):
        with pytest.raises(RuntimeError, match="boom"):
            with Testbed(2, "500mbit") as tb:
                ids.append(tb.run_id)
                assert leftovers(tb.run_id)["namespaces"]
                raise RuntimeError("boom")
    assert len(set(ids)) == 3
    for run_id in ids:
        assert leftovers(run_id) == EMPTY


@needs_root
def test_two_testbeds_at_once_do_not_collide():
    with Testbed(2, "100mbit") as a, Testbed(2, "100mbit") as b:
        assert a.run_id != b.run_id
        for tb in (a, b):  # the owner's pid, written whole (write_atomic: no temp file left)
            assert (testbed.REGISTRY / tb.run_id).read_text() == str(os.getpid())
            assert not list(testbed.REGISTRY.glob(f".{tb.run_id}.*"))
        removed = cleanup_stale()
        assert a.run_id not in removed and b.run_id not in removed
        for tb in (a, b):
            out = tb.run(["sh", "-c", "echo $GLOO_SOCKET_IFNAME"])
            assert out[0].stdout.strip() == f"{tb.run_id}n0"
        assert leftovers(a.run_id)["namespaces"] and leftovers(b.run_id)["namespaces"]
    assert leftovers(a.run_id) == EMPTY and leftovers(b.run_id) == EMPTY


@needs_root
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_tears_everything_down(sig):
    # SIGINT: a plain command's job; SIGTERM: a module job, forked from a server per
    # namespace (the same teardown: KeyboardInterrupt or SystemExit through `close`)
    proc, pipe = _holder(_sleep_job if sig == signal.SIGINT else _sleep_module)
    run_id = pipe.recv()
    assert run_id.startswith(testbed.PREFIX) and leftovers(run_id)["namespaces"]
    if sig == signal.SIGTERM:
        _until_forked(run_id, 4)  # 2 servers, 2 jobs
    os.kill(proc.pid, sig)
    proc.join(timeout=30)
    assert proc.exitcode is not None  # it ended
    assert leftovers(run_id) == EMPTY and _server_and_jobs(run_id) == []
    assert not (testbed.REGISTRY / run_id).exists()
    assert not (testbed.SOCKETS / run_id).exists()


@needs_root
def test_cleanup_stale_removes_a_killed_run_but_not_a_live_one():
    proc, pipe = _holder(_sleep_module)
    dead = pipe.recv()
    with Testbed(2, "100mbit") as live:
        _until_forked(dead, 4)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        assert leftovers(dead)["namespaces"]  # SIGKILL gives no chance to clean up
        assert len(_server_and_jobs(dead)) == 4
        assert dead in cleanup_stale()
        assert leftovers(dead) == EMPTY and _server_and_jobs(dead) == []
        assert not (testbed.SOCKETS / dead).exists()
        assert len(leftovers(live.run_id)["namespaces"]) == 2


def _probe_runs(tb, cwd):
    """The probe's outcomes (return codes, parsed stdout, stderr's last line) in `tb`, per
    case: all succeed, one fails (the other is stopped), an exception, a SystemExit message."""
    argv = [sys.executable, "-m", "probe"]
    outcomes = []
    for case in (["0", "0"], ["sleep", "started0-3"], ["0", "after0-raise"], ["0", "after0-bye"]):
        results = tb.run([*argv, *case], env={"PROBE_EXTRA": "x"}, cwd=cwd, check=False,
                         timeout=120)
        outcomes.append([(r.returncode, json.loads(r.stdout.splitlines()[0]),
                          (r.stderr.strip().splitlines() or [""])[-1]) for r in results])
        for pid_file in cwd.glob("*.pid"):  # a later run may draw the same MASTER_PORT
            pid_file.unlink()
    with pytest.raises(TimeoutError):
        tb.run([*argv, "sleep", "sleep"], env={"PROBE_EXTRA": "x"}, cwd=cwd, timeout=1)
    return outcomes


@needs_root
def test_module_jobs_fork_from_a_server_per_namespace_as_fresh_ones_run(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    with Testbed(2, "1gbit") as tb:
        forked = _probe_runs(tb, tmp_path)
        servers = _server_and_jobs(tb.run_id)
        parent_of = {pid: _parent(pid) for pid in servers}
        tb.fork = False
        fresh = _probe_runs(tb, tmp_path)
        run_id = tb.run_id
    # every case ends alike: codes (a SystemExit's, an exception's 1, SIGTERM for the rank
    # stopped when the other failed) and stderr's last line
    codes = [[(code, last) for code, _, last in case] for case in fresh]
    assert codes == [[(code, last) for code, _, last in case] for case in forked]
    assert codes[1:] == [[(-15, ""), (3, "")], [(0, ""), (1, "ValueError: the probe failed")],
                         [(0, ""), (1, "bye")]]
    seen = [[row for _, row, _ in case] for case in forked]
    for case_fresh, case_forked in zip(fresh, forked):
        for (_, a, _), (_, b, _) in zip(case_fresh, case_forked):  # the same start, less torch
            assert (a["preloaded"], b["preloaded"]) == (False, True)
            assert (a["dynamo"], b["dynamo"]) == (False, True)  # the default preload's
            assert b["threads"] == 1  # OMP_NUM_THREADS = threads, read by the server's torch
            same = ("name", "argv", "cwd", "path0", "leader", "net", "sys", "extra")
            assert {k: a[k] for k in same} == {k: b[k] for k in same}
            assert a["env"]["RANK"] == b["env"]["RANK"] and a["env"]["OMP_NUM_THREADS"] == "1"
            assert a["ppid"] == os.getpid() != b["ppid"]
    assert seen[0][0]["name"] == "__main__" and seen[0][0]["leader"]
    assert seen[0][0]["argv"] == [str(tmp_path / "probe.py"), "0", "0"]
    assert seen[2][1]["argv"][1:] == ["0", "after0-raise"]
    assert seen[0][0]["path0"] == seen[0][0]["cwd"] == str(tmp_path)
    # one server per namespace, reused by every run, in that namespace, gone with the testbed;
    # namespace 1's forked from namespace 0's (no interpreter's start, no imports)
    parents = {rank: {case[rank]["ppid"] for case in seen} for rank in (0, 1)}
    assert len(parents[0]) == len(parents[1]) == 1 and parents[0] != parents[1]
    assert set.union(*parents.values()) <= set(servers)
    assert parent_of[next(iter(parents[1]))] == next(iter(parents[0]))
    assert seen[0][0]["net"] != seen[0][1]["net"]
    assert f"{run_id}n1" in seen[0][1]["sys"] and f"{run_id}n0" not in seen[0][1]["sys"]
    assert leftovers(run_id) == EMPTY and _server_and_jobs(run_id) == []
