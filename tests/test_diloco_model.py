"""The performance model prices a DiLoCo variant per inner step (the single worker's iteration
plus each fragment's outer exchange once per H steps, less what `delay` overlaps), and whatif,
advise and time to accuracy rank variants beside per-step methods."""
import json

import pandas as pd
import pytest

from gradcomp import cli
from gradcomp.diloco import outer_method
from gradcomp.evaluation.analyses.advise import advise, verdict
from gradcomp.evaluation.analyses.time_to_accuracy import unreached
from gradcomp.evaluation.model.cost_tables import cost_table
from gradcomp.evaluation.model.methods import resolve
from gradcomp.evaluation.model.network import Network
from gradcomp.evaluation.model.timeline import predict
from gradcomp.evaluation.profiles.profiles import load_profile

PROFILE = load_profile("resnet50")


def test_one_fragment_adds_the_exchange_and_outer_step_once_per_h_steps():
    network = Network(8, "1gbit")
    for H in (1, 10, 100):
        pred = predict(PROFILE, network, f"diloco:H={H}")
        exchange = network.cost("allreduce", PROFILE.nbytes, PROFILE.add_time)
        expected = PROFILE.t_iter_single + (exchange + PROFILE.optimizer_s) / H
        assert pred.t_iter_s == pytest.approx(expected)
        assert pred.wire_bytes == pytest.approx(PROFILE.nbytes / H)
        assert pred.compression == pytest.approx(H)
        assert pred.exposed_comm_s == pytest.approx(expected - PROFILE.t_iter_single)
    ddp = predict(PROFILE, network, "none")
    slow = predict(PROFILE, Network(8, "100mbit"), "diloco:H=100")
    assert slow.speedup == pytest.approx(predict(PROFILE, Network(8, "100mbit"), "none")
                                         .t_iter_s / slow.t_iter_s)
    assert ddp.t_iter_s > pred.t_iter_s


def test_delay_hides_the_exchange_behind_inner_steps():
    network = Network(8, "100mbit")
    plain = predict(PROFILE, network, "diloco:H=100,fragments=4")
    hidden = predict(PROFILE, network, "diloco:H=100,fragments=4,delay=24")
    assert list(plain.buckets["fragment"]) == [0, 1, 2, 3]
    assert plain.buckets["numel"].sum() == sum(PROFILE.sizes)
    compute = PROFILE.t_iter_single
    rows = hidden.buckets
    for exchange, exposed, encode in zip(rows["exchange_s"], rows["exposed_s"],
                                         rows["encode_s"]):
        assert exposed == pytest.approx(encode + max(0.0, exchange - 24 * compute)
                                        + PROFILE.optimizer_s)
    assert hidden.t_iter_s < plain.t_iter_s
    assert hidden.wire_bytes == pytest.approx(plain.wire_bytes)


def test_the_outer_method_prices_the_exchange():
    network = Network(8, "100mbit")
    none, int8 = (predict(PROFILE, network, f"diloco:H=100,method={m}") for m in ("none", "int8"))
    assert int8.compression > 3.9 * none.compression
    variant = resolve("diloco:H=100,method=topk,ratio=0.001,error_feedback=true")
    assert variant.name == "diloco(H=100, method=topk, ratio=0.001, error_feedback=True)"
    assert variant.diloco.error_feedback and variant.aggregation == "allgather"
    assert outer_method("diloco:H=100,method=topk,ratio=0.01") == "topk"
    assert outer_method("diloco(H=10, method=int8)") == "int8"
    assert outer_method("diloco:H=10") == "none" and outer_method("topk:ratio=0.1") is None
    table = cost_table("v100")
    assert table.priced("diloco:H=10,method=int8") and table.priced("diloco(H=10, method=int8)")


def test_advise_ranks_variants_with_per_step_methods():
    table = advise("resnet50", 8, "100mbit", methods=["none", "int8", "diloco:H=100,method=int8"])
    assert table["method"].iloc[0] == "diloco(H=100, method=int8)"
    assert set(table["method"]) >= {"none", "int8"}
    first = table.iloc[0]
    assert first["compression"] == pytest.approx(100 * table.set_index("method")
                                                 .loc["int8", "compression"], rel=1e-6)


def convergence_rows():
    """A convergence summary as `bench converge` writes it: none and DiLoCo H=10 reach the
    target, DiLoCo H=50 does not."""
    base = dict(task="teacher", metric="accuracy", target=0.85, seed=0, max_iters=200,
                diverged=False, final_accuracy=0.9, bytes_sent_per_iter=1.0, ratio=1.0)
    rows = [("none", {}, True, 70), ("diloco", {"H": 10, "method": "none"}, True, 80),
            ("diloco", {"H": 50, "method": "none"}, False, float("nan"))]
    return pd.DataFrame([{**base, "method": m, "options": json.dumps(o), "error_feedback": False,
                          "reached": r, "iterations_to_target": i} for m, o, r, i in rows])


def test_time_to_target_ranks_variants_and_names_those_that_missed():
    table = advise("resnet50", 8, "1gbit", methods=["none", "diloco"],
                   convergence=convergence_rows())
    assert list(table["variant"]) == ["diloco(H=10, method=none)", "none",
                                      "diloco(H=50, method=none)"]
    first = table.iloc[0]
    assert first["time_to_target_s"] == pytest.approx(80 * first["t_iter_s"])
    assert unreached(table) == ["diloco(H=50, method=none)"]
    assert verdict(table).startswith("Yes: diloco(H=10, method=none) reaches it in 80")


def test_cli_whatif_and_advise_take_variants(capsys):
    assert cli.main(["whatif", "--method", "diloco:H=100,method=int8", "--bandwidth",
                     "100mbit", "--json"]) == 0
    capsys.readouterr()
    assert cli.main(["advise", "--methods", "none,diloco:H=100,method=int8", "--bandwidth",
                     "100mbit", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["ranking"][0]["method"] == "diloco(H=100, method=int8)"
    assert "not asked for" not in answer["verdict"]
    with pytest.raises(SystemExit) as exc:
        cli.main(["advise", "--methods", "none,diloco:H=0", "--bandwidth", "1gbit"])
    assert exc.value.code == 2 and "diloco H=0 is not allowed" in capsys.readouterr().err
