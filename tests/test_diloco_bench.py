"""DiLoCo variants in `bench converge` and `bench train` beside per-step methods, through the
CLI (each bench spawns 2 gloo ranks once): rows keyed by the variant's options, bytes from the
outer exchanges' telemetry (a sync's bytes over H), bytes per token, curves against tokens and
wall time; bad variants are one-line errors."""
import json

import pytest

import gradcomp
from gradcomp import cli
from gradcomp.diloco import Variant
from gradcomp.evaluation.benches.converge import QUICK, load_curves

pytestmark = pytest.mark.slow

H = 10


@pytest.fixture(scope="module")
def converged(tmp_path_factory):
    out = tmp_path_factory.mktemp("diloco") / "converge.csv"
    code = cli.main(["bench", "converge", "--quick", "--methods",
                     f"none,diloco:H={H},diloco:H={H},method=int8", "--out", str(out),
                     "--json"])
    assert code == 0
    return out


def rows(out):
    import pandas as pd

    return pd.read_csv(out)


def test_converge_runs_variants_beside_per_step_methods(converged):
    frame = rows(converged)
    got = sorted((m, json.loads(o).get("method", ""), ef) for m, o, ef in
                 zip(frame["method"], frame["options"], frame["error_feedback"]))
    assert got == [("diloco", "int8", False), ("diloco", "int8", True),
                   ("diloco", "none", False), ("none", "", False)]
    params = int(frame["params"].iloc[0])
    for row in frame.itertuples():
        options = json.loads(row.options)
        if row.method == "diloco":  # one sync of the whole model per H iterations
            wire = gradcomp.compressor(options["method"]).wire_nbytes(params)
            assert row.bytes_sent_per_iter == pytest.approx(wire / H)
            assert row.iterations_run % H == 0 or row.iterations_run == QUICK["max_iters"]
        assert row.bytes_sent_per_token == pytest.approx(row.bytes_sent_total / row.tokens)
        assert row.tokens == row.iterations_run * row.batch_size  # teacher: samples
    none = frame[frame["method"] == "none"].iloc[0]
    plain = frame[(frame["method"] == "diloco") & ~frame["error_feedback"]
                  & frame["options"].str.contains('"method": "none"')].iloc[0]
    assert none["bytes_sent_per_token"] == pytest.approx(H * plain["bytes_sent_per_token"])
    assert plain["reached"]  # the teacher task's target, with syncs every 10 steps


def test_converge_curves_hold_tokens_and_wall_time(converged):
    curve = load_curves(converged)
    for _, run in curve.groupby(["method", "options", "error_feedback"]):
        assert list(run["tokens"]) == sorted(run["tokens"]) and run["tokens"].iloc[0] > 0
        assert (run["wall_s"].diff().dropna() >= 0).all()


def test_train_times_whole_syncs_and_counts_their_bytes(tmp_path, capsys):
    out = tmp_path / "train.csv"
    code = cli.main(["bench", "train", "--quick", "--model", "tiny", "--methods",
                     "ddp,diloco:H=4,method=int8,error_feedback=true", "--out", str(out),
                     "--json"])
    assert code == 0
    frame = rows(out)
    variant = frame[frame["method"] == "diloco"].iloc[0]
    assert variant["iterations"] == 4  # --quick's 3, rounded up to one sync
    assert json.loads(variant["options"])["error_feedback"] is True
    params = int(variant["params"])
    wire = gradcomp.compressor("int8").wire_nbytes(params)
    assert variant["bytes_sent"] == pytest.approx(wire / 4)
    assert variant["bytes_original"] == pytest.approx(4 * params / 4)
    ddp = frame[frame["method"] == "ddp"].iloc[0]
    assert ddp["bytes_sent"] == 4 * params and variant["t_iter_s"] > 0


@pytest.mark.parametrize("methods, message", [
    ("diloco:method=int8", "option H (inner steps between syncs) is required"),
    ("diloco:H=10,fragments=3", "diloco H must be a multiple of diloco fragments"),
    ("diloco:H=10,method=nope", "unknown compressor 'nope'"),
    ("diloco:H=10,method=int8,ratio=0.1", "option 'ratio' is not accepted by 'int8'"),
])
def test_bad_variants_are_one_line_errors(methods, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "converge", "--quick", "--methods", methods, "--out",
                  str(tmp_path / "c.csv")])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_variant_label_and_options():
    variant = Variant.from_options({"H": 50, "method": "topk", "ratio": 0.001, "delay": 2,
                                    "fragments": 5}, error_feedback=True)
    # options at their defaults (outer_lr 0.7, the method's own) are not shown
    assert variant.label() == ("diloco(H=50, method=topk, fragments=5, delay=2, ratio=0.001, "
                               "error_feedback=True)")
    assert variant.options()["ratio"] == 0.001 and variant.options()["outer_lr"] == 0.7
    int8 = Variant.from_options({"H": 10, "method": "int8", "seed": 3, "block_size": 256})
    assert int8.label() == "diloco(H=10, method=int8)"  # a seed never, a default neither


def test_run_measures_a_variants_outer_method_in_the_compress_bench():
    from gradcomp.evaluation.run import codec_cases

    cases = [("none", {}), ("diloco", {"H": 10, "method": "int8", "error_feedback": True}),
             ("int8", {}), ("diloco", {"H": 5}), ("diloco", {"H": 5, "method": "topk",
                                                             "ratio": 0.1})]
    assert codec_cases(cases) == [("none", {}), ("int8", {}), ("topk", {"ratio": 0.1})]
    assert codec_cases(None) is None
