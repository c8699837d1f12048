"""The topology options of the `gradcomp` command: `topology`, `whatif --topology
--algorithm`, `advise --topology --algorithms`, `bench collective --collectives`."""
import json

from test_cli import run


def test_topology_command_compares_algorithms_and_plots(tmp_path):
    plot = tmp_path / "times.png"
    out = run("topology", "--topology", "two-racks", "--topology", "random:1", "--workers", "6",
              "--nbytes", "1000000", "--plot", str(plot), "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["topology"] for r in rows] == ["two-racks", "random:1"]
    for r in rows:
        assert r["workers"] == 6 and r["forest_vs_cut"] >= 0.95
        assert r["forest_s"] < r["ring_s"]
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_whatif_on_a_topology():
    forest = json.loads(run("whatif", "--topology", "two-racks", "--method", "fp16",
                            "--json").stdout)
    assert forest["method"] == "fp16" and 0 < forest["sf"] < 1
    assert "break_even_bandwidth_bps" not in forest  # one bandwidth does not describe it
    text = run("whatif", "--topology", "two-racks", "--algorithm", "ring")
    assert text.returncode == 0 and "topology two-racks, ring all-reduce" in text.stdout
    out = run("whatif", "--topology", "two-racks", "--sweep")
    assert out.returncode != 0 and "--sweep is not allowed with --topology" in out.stderr


def test_advise_on_a_topology():
    out = json.loads(run("advise", "--topology", "random:2", "--algorithms", "ring,forest",
                         "--methods", "fp16", "--json").stdout)
    assert {r["algorithm"] for r in out["ranking"]} == {"ring", "forest"}
    assert len(out["ranking"]) == 4 and "all-reduce" in out["verdict"]


def test_bad_topology_options_are_parser_errors(tmp_path):
    out = run("whatif", "--topology", "three-racks")
    assert out.returncode == 2 and "'two-racks', 'random', 'homogeneous'" in out.stderr
    bad = tmp_path / "bad.csv"
    bad.write_text("0,1gbit\n0,0\n")
    out = run("advise", "--topology", str(bad), "--methods", "fp16")
    assert out.returncode == 2 and "not connected" in out.stderr


def test_bench_collective_runs_the_forest_executor(tmp_path):
    table = tmp_path / "coll.csv"
    out = run("bench", "collective", "--collectives", "forest", "--workers", "2",
              "--repeats", "1", "--quick", "--out", str(table), "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["collective"] for r in rows] == ["forest"] * 6
    assert all(r["matches_allreduce"] and r["world_size"] == 2 for r in rows)
    assert len(table.read_text().splitlines()) == 7  # appended to disk
