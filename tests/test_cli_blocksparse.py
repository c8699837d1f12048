"""The block-sparse all-reduce in the `gradcomp` command: the density sweep, what-if and
advise."""
import json

import pytest

from gradcomp.evaluation.benches.blocksparse import bench_block_sparse
from test_cli import run_here as run


def test_bench_collective_blocksparse_sweeps_densities_and_resumes(tmp_path):
    out = tmp_path / "sweep.csv"
    args = ("bench", "collective", "--blocksparse", "--numel", "4096", "--densities",
            "0.01,1", "--block-size", "64", "--repeats", "1", "--out", str(out), "--json")
    first = run(*args)
    assert first.returncode == 0, first.stderr
    rows = json.loads(first.stdout)
    assert sorted((r["mode"], r["density"]) for r in rows) == [
        ("dense", 1.0), ("sparse", 0.01), ("sparse", 1.0)]
    for r in rows:
        assert r["time_s"] > 0 and r["predicted_s"] > 0 and r["block_size"] == 64
    sparse = {r["density"]: r for r in rows if r["mode"] == "sparse"}
    assert sparse[0.01]["bytes_sent"] < sparse[1.0]["bytes_sent"]
    assert (tmp_path / "sweep.png").stat().st_size > 0
    # Resumed: the measured rows come back unchanged, nothing is spawned.
    again = bench_block_sparse(numel=4096, densities=[0.01, 1], block_size=64, out=out)
    assert sorted(again["time_s"]) == sorted(r["time_s"] for r in rows)


@pytest.mark.parametrize("bad, match", [(dict(densities=[0, 0.5]), "densities"),
                                        (dict(densities=[2]), "densities"),
                                        (dict(densities=["0.1", "x"]), "densities"),
                                        (dict(densities=[True]), "densities"),
                                        (dict(world_size=1), "world_size"),
                                        (dict(numel=0), "numel")])
def test_bench_blocksparse_bad_input_is_named(bad, match):
    with pytest.raises(ValueError, match=match):
        bench_block_sparse(**bad)


def test_whatif_and_advise_take_the_block_sparse_communicator():
    row = json.loads(run("whatif", "--profile", "resnet50", "--workers", "8", "--bandwidth",
                         "10gbit", "--method", "randomk+blocksparse", "--json").stdout)
    assert row["method"] == "randomk+blocksparse" and row["speedup"] > 1
    assert row["break_even_bandwidth_bps"] > 10e9
    out = json.loads(run("advise", "--profile", "resnet50", "--workers", "8", "--bandwidth",
                         "10gbit", "--methods", "topk,topk+blocksparse,randomk+blocksparse",
                         "--json").stdout)
    methods = {r["method"]: r for r in out["ranking"]}
    assert set(methods) == {"none", "fp16", "topk", "topk+blocksparse",
                            "randomk+blocksparse"}  # the baselines; fp16: a V100 has no bf16
    assert methods["topk+blocksparse"]["aggregation"] == "blocksparse"


def test_whatif_refuses_block_sparse_for_a_dense_method():
    out = run("whatif", "--method", "fp16+blocksparse")
    assert out.returncode != 0
    assert "fp16+blocksparse" in out.stderr and "topk+blocksparse" in out.stderr
