"""The topology options of the `gradcomp` command: `topology`, `whatif --topology
--algorithm`, `advise --topology --algorithms`, `bench collective --collectives`."""
import json

from test_cli import run_here as run


def run_json(*args):
    proc = run(*args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


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
    forest = run_json("whatif", "--topology", "two-racks", "--method", "fp16",
                      "--json")
    assert forest["method"] == "fp16" and 0 < forest["sf"] < 1
    assert "break_even_bandwidth_bps" not in forest  # one bandwidth does not describe it
    text = run("whatif", "--topology", "two-racks", "--algorithm", "ring")
    assert text.returncode == 0 and "on topology two-racks" in text.stdout
    assert "ring all-reduce:" in text.stdout
    out = run("whatif", "--topology", "two-racks", "--sweep")
    assert out.returncode != 0 and "--sweep is not allowed with --topology" in out.stderr


def test_advise_on_a_topology():
    out = run_json("advise", "--topology", "random:2", "--algorithms", "ring,forest",
                   "--methods", "fp16", "--json")
    assert {r["algorithm"] for r in out["ranking"]} == {"ring", "forest"}
    # fp16 and the baseline none, on each algorithm (fp16 is the V100's 16-bit baseline)
    assert len(out["ranking"]) == 4
    # one recommendation, as without a topology, with its fastest algorithm named
    fastest = min((r for r in out["ranking"] if r["method"] in ("none", "bf16", "fp16")),
                  key=lambda r: r["t_iter_s"])
    assert out["verdict"].startswith("- **Recommendation**")
    assert "on topology random:2 (8 workers)" in out["verdict"]
    assert f"On this topology: the {fastest['algorithm']} all-reduce." in out["verdict"]


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


def test_a_topology_file_sets_workers_and_latency(tmp_path):
    path = tmp_path / "three.json"
    path.write_text(json.dumps({"bandwidth_bps": [[0, 1e9, 1e9], [1e9, 0, 1e9], [1e9, 1e9, 0]],
                                "latency_s": 0.01}))
    own = run_json("whatif", "--topology", str(path), "--algorithm", "ring",
                   "--json")
    assert own["workers"] == 3
    given = run_json("whatif", "--topology", str(path), "--algorithm", "ring",
                     "--latency", "0", "--workers", "3", "--json")
    assert given["workers"] == 3 and own["t_iter_s"] > given["t_iter_s"]
    out = run("whatif", "--workers", "8", "--topology", str(path))
    assert out.returncode == 2 and "workers=8 is not allowed" in out.stderr
    assert "it has 3 workers" in out.stderr


def test_switched_homogeneous_matches_the_plain_model_and_ps_is_slower():
    plain = run_json("whatif", "--bandwidth", "1gbit", "--json")
    ring, ps = (run_json("whatif", "--bandwidth", "1gbit", "--topology", "homogeneous",
                         "--algorithm", a, "--json") for a in ("ring", "ps"))
    assert abs(ring["t_iter_s"] / plain["t_iter_s"] - 1) < 2e-3
    assert ps["t_iter_s"] > ring["t_iter_s"]


def test_advise_convergence_with_topology_is_a_parser_error(tmp_path):
    table = tmp_path / "conv.csv"
    table.write_text("method,task\nnone,x\n")
    out = run("advise", "--topology", "two-racks", "--convergence", str(table))
    assert out.returncode == 2 and "--convergence with --topology" in out.stderr
