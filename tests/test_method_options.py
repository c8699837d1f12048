"""A method's options, `name:key=value,...`, on every question command: one parser, the
variant's wire bytes, its own codec costs where the table has a row for it, else its
method's defaults' with the answer saying so; a bad option is one line naming it, exit 2."""
import json

import pandas as pd
import pytest

from gradcomp.evaluation.model.cost_tables import cost_table, measured_table
from gradcomp.evaluation.model.fit import codec_costs
from gradcomp.evaluation.model.methods import method_spec, parse_methods, resolve
from gradcomp.evaluation.model.network import Network
from gradcomp.evaluation.report.report import COLLECTIVE, write_report
from gradcomp.evaluation.common.env import environment
from gradcomp.evaluation.common.store import ResultTable
from test_cli import run_here


def test_one_parser_reads_methods_with_options():
    text = "topk:ratio=0.001,powersgd:rank=16,warm_start=false,bf16,threshold:threshold=1e-3"
    methods = parse_methods(text)
    assert methods == [("topk", {"ratio": 0.001}),
                       ("powersgd", {"rank": 16, "warm_start": False}), ("bf16", {}),
                       ("threshold", {"threshold": 0.001})]
    assert isinstance(methods[1][1]["rank"], int)
    assert [parse_methods(method_spec(n, o))[0] for n, o in methods] == methods
    assert method_spec("powersgd", {"rank": 4, "warm_start": False}) == \
        "powersgd:rank=4,warm_start=false"


@pytest.mark.parametrize("text,named", [
    (":rank=3", "method name is empty"), ("rank=3,topk", "'rank=3' comes before"),
    ("powersgd:rank", "'rank' is not key=value"), ("topk,", "method name is empty"),
    ("powersgd:=4", "'=4' is not key=value")])
def test_bad_syntax_names_the_option(text, named):
    with pytest.raises(ValueError, match=f"methods={text!r} is not allowed: .*{named}"):
        parse_methods(text)


def test_the_variant_sends_its_own_bytes_and_bad_options_name_themselves():
    shapes = [(256, 512), (256,)]
    rank4, rank1 = resolve("powersgd:rank=4"), resolve("powersgd")
    assert rank4.name == "powersgd(rank=4)"
    assert rank4.wire(shapes, 4) == resolve("powersgd", rank=4).wire(shapes, 4) == \
        (256 * 4 + 4 * 256 * 4, 4 * 512 * 4)
    assert sum(rank4.wire(shapes, 4)) > 3 * sum(rank1.wire(shapes, 4))
    assert resolve("topk:ratio=0.1").wire([(1000,)], 4) != resolve("topk").wire([(1000,)], 4)
    with pytest.raises(ValueError, match="option 'rnk' is not accepted by 'powersgd'"):
        resolve("powersgd:rnk=4")
    with pytest.raises(ValueError, match="rank=0 is not allowed"):
        resolve("powersgd:rank=0")
    with pytest.raises(ValueError, match="names 2 methods"):
        resolve("powersgd:rank=4,topk")


def _codec_rows(method, options, a, b):
    sizes = [2**k for k in range(10, 21, 2)]
    return pd.DataFrame({"method": method, "options": json.dumps(options), "numel": sizes,
                         "device_name": "cpu", "encode_s": [a + b * n for n in sizes],
                         "decode_s": [a / 2 + b * n / 2 for n in sizes]})


def test_a_variant_is_priced_by_its_own_row_else_by_its_methods_defaults():
    frame = pd.concat([_codec_rows("powersgd", {"rank": 1}, 1e-4, 1e-9),
                       _codec_rows("powersgd", {"rank": 4, "seed": 0}, 3e-4, 4e-9)])
    table = measured_table(frame)
    assert set(table.costs) == {"powersgd", "powersgd(rank=4)"}
    own = resolve("powersgd:rank=4", table.costs)
    assert own.encode == pytest.approx((3e-4, 4e-9)) and own.costs_note == ""
    borrowed = resolve("powersgd:rank=16", table.costs)
    assert borrowed.encode == pytest.approx((1e-4, 1e-9))
    assert borrowed.costs_note == ("codec costs of powersgd with its default options: the "
                                   "table has no row for powersgd(rank=16)")
    assert table.priced("powersgd:rank=16") and table.priced("powersgd(rank=16)")
    assert resolve("powersgd", cost_table("h100").costs).costs_note == ""


def test_whatif_and_advise_take_options_and_say_whose_costs_they_use():
    out = run_here("whatif", "--method", "powersgd:rank=4", "--bandwidth", "25gbit", "--json")
    assert out.returncode == 0, out.stderr
    row = json.loads(out.stdout)
    assert row["method"] == "powersgd(rank=4)" and row["costs"] == "v100"
    assert row["costs_note"] == ("codec costs of powersgd with its default options: the "
                                 "table has no row for powersgd(rank=4)")
    rank1 = json.loads(run_here("whatif", "--method", "powersgd", "--bandwidth", "25gbit",
                                "--json").stdout)
    assert rank1["costs_note"] == "" and row["wire_bytes"] > 2 * rank1["wire_bytes"]
    text = run_here("whatif", "--method", "powersgd:rank=4").stdout
    assert "method powersgd(rank=4)" in text and "no row for powersgd(rank=4)" in text
    out = run_here("advise", "--methods", "topk:ratio=0.001,powersgd:rank=16,powersgd",
                   "--json")
    assert out.returncode == 0, out.stderr
    costs = {r["method"]: r["costs"] for r in json.loads(out.stdout)["ranking"]}
    assert costs["powersgd"] == "fitted" and costs["powersgd(rank=16)"] == costs[
        "topk(ratio=0.001)"].replace("topk", "powersgd") == "fitted: powersgd's default options"


@pytest.mark.parametrize("argv,named", [
    (["whatif", "--method", "powersgd:rnk=4"], "option 'rnk' is not accepted by 'powersgd'"),
    (["whatif", "--method", "topk:ratio=2"], "ratio=2 is not allowed"),
    (["advise", "--methods", "topk,powersgd:rank=0"], "rank=0 is not allowed"),
    (["advise", "--methods", "powersgd:rank"], "'rank' is not key=value"),
    (["run", "--methods", "powersgd:rnk=4", "--out", "{tmp}/r"], "option 'rnk'"),
    (["report", "{tmp}", "--methods", "bf16,warm_start"], "unknown compressor 'warm_start'"),
    (["report", "{tmp}", "--methods", "powersgd:rank=x"], "rank='x' is not allowed")])
def test_a_bad_option_is_one_line_naming_it_exit_2(tmp_path, argv, named):
    out = run_here(*[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and named in out.stderr
    assert not (tmp_path / "r").exists()


def test_the_report_prices_the_variants_asked_for(tmp_path):
    net, env = Network(2, 1e9, 1e-5), environment("gloo", 2)
    for nbytes in (1024, 2**20):
        ResultTable(tmp_path / COLLECTIVE).append({"collective": "allreduce", "nbytes": nbytes,
                                                   "time_s": net.cost("allreduce", nbytes),
                                                   **env})
    report = write_report(tmp_path, "resnet50", 8, "10gbit",
                          methods=["powersgd:rank=4", "fp16"])
    text = report.path.read_text()
    row = next(line for line in text.splitlines() if "| powersgd(rank=4) |" in line)
    assert "| fitted: powersgd's default options |" in row.replace("  ", "")
    assert ("Priced with their method's default options, the table having no row for the "
            "variant: powersgd(rank=4).") in text
    out = run_here("report", str(tmp_path), "--methods", "powersgd:rank=4,fp16", "--force")
    assert out.returncode == 0, out.stderr


def test_a_variant_measured_by_the_compress_bench_is_its_own_row():
    from gradcomp.evaluation.benches.compress import bench_compress

    frame = bench_compress([("powersgd", {"rank": 4}), ("topk", {"ratio": 0.001}), "fp16"],
                           sizes=[4096, 16384, 65536], repeats=1, warmup=0)
    table = measured_table(frame)
    assert set(table.fits) >= {("powersgd(rank=4)", "encode"), ("topk(ratio=0.001)", "encode"),
                               ("fp16", "encode")}
    for spec in ("powersgd:rank=4", "topk:ratio=0.001", "fp16"):
        method = resolve(spec, codec_costs(table.fits))  # every fit: the keys are checked
        assert method.priced_by == method.name and method.costs_note == ""
