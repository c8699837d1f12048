"""The two-tier testbed: nodes as namespaces of several ranks (real namespaces, root)."""
import json
import os
import shutil
import sys

import pytest

from gradcomp import cli
from gradcomp.evaluation.common.forkserver import WITHOUT_DDP
from gradcomp.evaluation.testbed import testbed
from gradcomp.evaluation.testbed.nodes import NodeTestbed, run_on_nodes
from gradcomp.evaluation.testbed.testbed import leftovers

REASON = testbed.unavailable_reason()
needs_root = pytest.mark.skipif(REASON is not None, reason=REASON or "")
WORKER = os.path.join(os.path.dirname(__file__), "node_workers.py")


def test_ranks_are_numbered_node_by_node_as_torchrun_numbers_them():
    tb = NodeTestbed(2, 3, "1gbit")
    env = tb.environment(4, port=29600)
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                "GROUP_RANK", "NODE_RANK", "NNODES", "MASTER_ADDR",
                                "MASTER_PORT")} == {
        "RANK": "4", "WORLD_SIZE": "6", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "3",
        "GROUP_RANK": "1", "NODE_RANK": "1", "NNODES": "2", "MASTER_ADDR": "10.213.0.1",
        "MASTER_PORT": "29600"}
    assert env["GLOO_SOCKET_IFNAME"] == tb.links[1].interface  # its node's veth
    assert tb.processes == 6 and tb.command(4, ["true"])[3] == tb.links[1].namespace
    launcher = NodeTestbed(2, 3, per_node=True)
    env = launcher.environment(1, port=29600)
    assert launcher.processes == 2 and "RANK" not in env and "LOCAL_RANK" not in env
    assert {k: env[k] for k in ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK",
                                "PET_MASTER_ADDR", "PET_MASTER_PORT")} == {
        "PET_NNODES": "2", "PET_NPROC_PER_NODE": "3", "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "10.213.0.1", "PET_MASTER_PORT": "29600"}


def test_bad_options_name_the_option(capsys):
    with pytest.raises(ValueError, match="nodes"):
        NodeTestbed(1, 2)
    with pytest.raises(ValueError, match="gpus_per_node"):
        NodeTestbed(2, 0)
    with pytest.raises(ValueError, match="p2p"):
        NodeTestbed(3, 2, topology="p2p")
    with pytest.raises(ValueError, match="command"):
        run_on_nodes([])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["testbed", "--gpus-per-node", "2", "--", "true"])
    assert exit_.value.code == 2 and "--nodes" in capsys.readouterr().err


def _rows(results):
    rows = [json.loads(line) for r in results for line in r.stdout.splitlines()
            if line.startswith("{")]
    return sorted(rows, key=lambda row: row["RANK"])


def _check_job(rows, run_id):
    # 2 nodes x 2: ranks node by node, torchrun's numbering, each in its node's namespace,
    # all-reduces over every rank (1+2+3+4) and inside each node (1+2, 3+4) agree.
    assert [(r["RANK"], r["LOCAL_RANK"], r["GROUP_RANK"], r["NODE_RANK"]) for r in rows] == [
        (0, 0, 0, 0), (1, 1, 0, 0), (2, 0, 1, 1), (3, 1, 1, 1)]
    assert all(r["WORLD_SIZE"] == r["dist_world"] == 4 and r["LOCAL_WORLD_SIZE"] == 2
               and r["dist_rank"] == r["RANK"] for r in rows)
    assert [r["namespace"] for r in rows] == [f"{run_id}-{n}" for n in (0, 0, 1, 1)]
    assert [r["sum"] for r in rows] == [10.0] * 4
    assert [r["node_sum"] for r in rows] == [3.0, 3.0, 7.0, 7.0]


@needs_root
def test_a_job_per_rank_and_a_torchrun_job_per_node_and_nothing_left():
    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable),
                                                        "torchrun")
    with NodeTestbed(2, 2, "1gbit") as tb:  # a module job: forked from each node's server
        tb.preload = WITHOUT_DDP  # the job builds no DDP model: torch._dynamo is not imported
        rows = _rows(tb.run([sys.executable, "-m", "node_workers"], timeout=120,
                            cwd=os.path.dirname(WORKER)))
        _check_job(rows, tb.run_id)
        run_id = tb.run_id
    assert all(r["preloaded"] and not r["dynamo"] and r["threads"] == 1 for r in rows)
    parents = [r["parent"] for r in rows]  # the ranks of a node share its server
    assert parents[0] == parents[1] != parents[2] == parents[3] != os.getpid()
    assert leftovers(run_id) == {"namespaces": [], "links": [], "qdiscs": []}
    with NodeTestbed(2, 2, "1gbit", per_node=True) as tb:
        results = tb.run([torchrun, WORKER], timeout=180)  # one torchrun per node
        assert len(results) == 2
        _check_job(_rows(results), tb.run_id)
        assert not any(r["preloaded"] for r in _rows(results))  # torchrun's: fresh
        run_id = tb.run_id
    assert leftovers(run_id) == {"namespaces": [], "links": [], "qdiscs": []}


@needs_root
def test_check_times_the_loopback_inside_a_node_and_the_rate_across(capsys):
    # 4 MiB at 100 Mbit/s: across 2 nodes 2(p-1)/p * S * 8 / B = 0.336 s (tolerance as for
    # the flat check: headers, the token bucket, gloo); inside a node the loopback carries
    # it unshaped, far below what the link rate would take.
    assert cli.main(["testbed", "--nodes", "2", "--gpus-per-node", "2", "--rate", "100mbit",
                     "--check", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["inter"]["at_link_rate_s"] == pytest.approx(0.33554432)
    assert abs(row["inter"]["rel_error"]) <= 0.2, row
    assert row["intra"]["measured_s"] < 0.3 * row["intra"]["at_link_rate_s"], row
