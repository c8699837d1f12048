"""A pytest plugin that writes each test's CPU seconds (this process, the children it reaped, and
its live children with theirs, e.g. the fork server's ranks) and wall seconds to the CSV file
$SUITE_CPU_OUT, so that the suite's cost is measured in CPU time, which load does not inflate
as much as wall time:

    SUITE_CPU_OUT=cpu.csv PYTHONPATH=benchmarks python -m pytest -q -p suite_cpu

On pytest-xdist workers too (`make test`'s options after `-p suite_cpu`): each worker measures
its tests, and the figures travel with the test reports to the controller, which writes the
file.
"""
import csv
import os
import time

import pytest

TICK = os.sysconf("SC_CLK_TCK")
_rows = []
_START = pytest.StashKey[tuple]()
KEY = "suite_cpu"  # the user property that carries (cpu_s, wall_s)


def _stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    return int(fields[1]), sum(int(x) for x in fields[11:15])  # ppid, utime+stime+cutime+cstime


def _cpu():
    me = os.getpid()
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            ppid, ticks = _stat(int(name))
        except (OSError, ValueError):
            continue
        if int(name) == me or ppid == me:
            total += ticks
    return total / TICK


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_START] = _cpu(), time.perf_counter()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "teardown":  # the test is over: setup, call and teardown measured
        c0, t0 = item.stash[_START]
        report.user_properties = [*report.user_properties,
                                  (KEY, (_cpu() - c0, time.perf_counter() - t0))]


def pytest_runtest_logreport(report):
    """Where the reports end up: this process, or the controller of xdist's workers."""
    for name, value in report.user_properties:
        if name == KEY:
            _rows.append((report.nodeid, *value))


def pytest_sessionfinish(session):
    out = os.environ.get("SUITE_CPU_OUT")
    if out and not hasattr(session.config, "workerinput"):  # a worker leaves it to the controller
        with open(out, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["nodeid", "cpu_s", "wall_s"])
            writer.writerows((n, f"{c:.2f}", f"{w:.2f}") for n, c, w in _rows)
