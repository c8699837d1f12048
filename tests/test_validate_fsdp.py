"""`gradcomp validate --parallelism fsdp`: the FSDP timeline's pieces it uses (FSDP's collectives
in the network and the fit, units of the bench's sizes, the serial timeline of a CPU, the codec
costs), its option errors, and one real run in the testbed (root)."""
import json
import math

import numpy as np
import pandas as pd
import pytest

from gradcomp.evaluation.model.fit import fit_collectives, fsdp_codec_costs, network_from_fit
from gradcomp.evaluation.model.fsdp import predict_fsdp, units_of
from gradcomp.evaluation.model.methods import MethodCost
from gradcomp.evaluation.model.network import Network
from gradcomp.evaluation.profiles.profiles import Profile
from gradcomp.evaluation.testbed import testbed
from gradcomp.evaluation.testbed.validate_fsdp import (codec_sizes, timeline_method, units,
                                                       validate_fsdp_sweep)

REASON = testbed.unavailable_reason()
# Three gradients; 2 workers at 1e6 bytes/s.
THREE = Profile("three", sizes=(50_000, 200_000, 250_000), ready_s=(0.05, 0.1, 0.3),
                forward_s=0.2, backward_s=0.3, optimizer_s=0.05)
SLOW = Network(2, 8e6)


def test_reduce_scatter_and_all_to_all_by_hand():
    net = Network(4, 8e6, latency_s=0.01)  # 1e6 bytes/s
    # (p-1) alpha + (p-1)/p S/B: 0.03 + 0.75 s for 1e6 bytes
    assert net.cost("reducescatter", 1e6) == pytest.approx(0.78)
    assert net.cost("alltoall", 1e6) == pytest.approx(0.78)
    assert net.cost("reducescatter", 1e6, lambda n: 1e-3) == pytest.approx(0.783)  # 3 adds
    assert net.prices("alltoall")
    fitted = Network(4, 8e6, {"allgather": 0.01}, {"allgather": 0.5})
    assert fitted.prices("allgather") and not fitted.prices("reducescatter")


def test_fit_collectives_recovers_reduce_scatter_and_all_to_all():
    rng = np.random.default_rng(2)
    rows = []
    for collective, rate in (("reducescatter", 4e9), ("alltoall", 6e9)):
        for p in (2, 4):
            net = Network(p, rate, 3e-5)
            for nbytes in np.logspace(3, 8, 11).round():  # whole bytes, as measured
                rows.append({"collective": collective, "world_size": p, "nbytes": nbytes,
                             "time_s": net.cost(collective, nbytes)
                             * (1 + 0.01 * rng.standard_normal())})
    fits = fit_collectives(pd.DataFrame(rows))
    assert fits["reducescatter"].params["bandwidth_bps"] == pytest.approx(4e9, rel=0.02)
    assert fits["alltoall"].params["bandwidth_bps"] == pytest.approx(6e9, rel=0.02)
    assert fits["alltoall"].params["alpha_s"] == pytest.approx(3e-5, rel=0.2)
    net = network_from_fit(fits, 2, "1gbit")
    assert net.prices("alltoall") and not net.prices("allgather")


def test_reduce_scatter_and_all_to_all_sizes_split_in_equal_parts():
    from gradcomp.evaluation.benches.collective import _cases

    assert _cases(["allgather", "alltoall"], [4, 16, 20], 2) == \
        [("allgather", 4), ("allgather", 16), ("allgather", 20), ("alltoall", 16)]
    assert _cases(["reducescatter"], [36, 40], 4) == [("reducescatter", 32)]


def test_units_of_the_bench_sizes_and_their_refusal():
    assert units_of(THREE, 25.0, [250_000, 250_000]) == [[0, 1], [2]]
    with pytest.raises(ValueError, match="unit_sizes=.*do not fall into units"):
        units_of(THREE, 25.0, [100_000, 400_000])
    with pytest.raises(ValueError, match="they hold 250000 of its 500000"):
        units_of(THREE, 25.0, [250_000])
    assert units("tiny", None) == [650, 4160, 2112]  # Linears in reverse, no root rest


def test_without_overlap_every_collective_waits_for_compute_and_holds_it():
    # Units of 1e6 bytes; every all-gather and reduce-scatter of a unit takes 0.5 s.
    # Serial: 2 gathers + forward 0.2, 2 gathers + backward 0.3, 2 reduce-scatters, step.
    pred = predict_fsdp(THREE, SLOW, "none", unit_sizes=[250_000, 250_000], overlap=False)
    assert pred.t_iter_s == pytest.approx(6 * 0.5 + 0.2 + 0.3 + 0.05)
    overlapped = predict_fsdp(THREE, SLOW, "none", unit_sizes=[250_000, 250_000])
    assert overlapped.t_iter_s < pred.t_iter_s
    # A compressed reduce-scatter: encode, exchange, decode in the compute thread.
    quarter = MethodCost.fixed_ratio(4.0, encode=(0.01, 0.0), decode=(0.02, 0.0))
    comp = predict_fsdp(THREE, SLOW, quarter, unit_sizes=[250_000, 250_000], overlap=False)
    # per unit: encode 0.01 + all-to-all of 2 chunks' payloads 0.125 s + 2 decodes 0.04
    assert comp.t_iter_s == pytest.approx(4 * 0.5 + 0.2 + 0.3 + 0.05 + 2 * 0.175)


def test_codec_costs_per_unit_encode_and_per_payload_decode():
    n = np.array([4098, 10250, 165248, 1049600])
    table = pd.DataFrame({"method": "int8", "world_size": 2, "numel": n,
                          "encode_s": 1e-4 + 2e-9 * n, "decode_s": 2 * (5e-5 + 1e-9 * n / 2)})
    (enc, dec), = fsdp_codec_costs(table).values()
    assert enc == pytest.approx((1e-4, 2e-9), rel=1e-6)
    assert dec == pytest.approx((5e-5, 1e-9), rel=1e-6)
    # The model's int8 at these costs; "fsdp" is FSDP's own reduce-scatter; gradcomp's
    # "none" goes through the all-to-all.
    assert timeline_method("int8", fsdp_codec_costs(table)).encode == pytest.approx(enc)
    assert timeline_method("fsdp", {}).name == "none"
    assert timeline_method("none", {}).name == "none (all-to-all)"


def test_codec_sizes_hold_the_units_and_sizes_off_powers_of_two():
    sizes = codec_sizes([10250, 1049600, 1049600], 2)
    assert {10250, 1049600} <= set(sizes) and len(sizes) >= 4
    assert all(n % 2 == 0 and n & (n - 1) for n in sizes)


def test_bad_methods_and_parallelism_are_named(capsys):
    from gradcomp import cli as command

    for argv, named in ((["--methods", "ddp"], "methods='ddp' is not allowed"),
                        (["--methods", "fsdp,powersgd"], "methods='powersgd' is not allowed"),
                        (["--methods", "nosuch"], "'fsdp', 'none', 'bf16'"),
                        (["--train-repeats", "2"],
                         "--train-repeats is not allowed with --parallelism fsdp"),
                        (["--min-timed-seconds", "5"],
                         "--min-timed-seconds is not allowed with --parallelism fsdp")):
        with pytest.raises(SystemExit):
            command.main(["validate", "--parallelism", "fsdp", *argv])
        assert named in capsys.readouterr().err
    with pytest.raises(SystemExit):
        command.main(["validate", "--parallelism", "hsdp"])
    assert "--parallelism: invalid choice: 'hsdp'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="methods=\\[\\] is not allowed"):
        validate_fsdp_sweep("unused", methods=[])


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_validate_fsdp_measures_predicts_and_resumes(tmp_path, capsys):
    from gradcomp import cli as command  # in this process; the testbed's jobs in their own

    capsys.readouterr()
    assert command.main(["validate", "--parallelism", "fsdp", "--rates", "2.5gbit",
                         "--methods", "fsdp,int8", "--model", "tiny", "--iterations", "2",
                         "--hook-repeats", "1", "--out", str(tmp_path), "--json"]) == 0
    rows = pd.DataFrame(json.loads(capsys.readouterr().out)["rows"])
    assert list(rows["method"]) == ["fsdp", "int8"] and (rows["rate_bps"] == 2.5e9).all()
    assert (rows["measured"] > 0).all()
    assert all(math.isfinite(p) and p > 0 for p in rows["predicted"])
    assert rows["rel_error"].to_numpy() == pytest.approx(
        ((rows["predicted"] - rows["measured"]) / rows["measured"]).to_numpy())
    for name in ("validation.csv", "validation.md", "validation.png", "conditions-fsdp.csv",
                 "fsdp-codec-2.5gbit.csv", "collective-fsdp-2.5gbit.csv", "train-fsdp-2.5gbit.csv",
                 "profile-fsdp-tiny-b64-2.5gbit.json"):
        assert (tmp_path / name).stat().st_size > 0, name
    coll = pd.read_csv(tmp_path / "collective-fsdp-2.5gbit.csv")
    assert set(coll["collective"]) == {"allgather", "reducescatter", "alltoall"}
    assert (coll["time_mean_s"] > 0).all() and (coll["repeats"] == 9).all()
    codec = pd.read_csv(tmp_path / "fsdp-codec-2.5gbit.csv")
    assert set(codec["method"]) == {"int8"} and {650, 4160, 2112} <= set(codec["numel"])
    assert (codec["slowest_rank"]).all() and (codec["encode_s"] > 0).all()
    assert (codec["repeats"] == 1).all()  # --hook-repeats
    profile = json.loads((tmp_path / "profile-fsdp-tiny-b64-2.5gbit.json").read_text())
    assert "communicate nothing" in profile["assumptions"]
    assert "FSDP2" in (tmp_path / "validation.md").read_text()
    # Resumed: nothing measured again, the same rows.
    stamps = {p.name: p.stat().st_mtime for p in tmp_path.glob("*-2.5gbit.*")}
    again = validate_fsdp_sweep(tmp_path, ["2.5gbit"], ["fsdp", "int8"], "tiny",
                                iterations=2, progress=False, hook_repeats=1)
    assert {p.name: p.stat().st_mtime for p in tmp_path.glob("*-2.5gbit.*")} == stamps
    assert list(again["measured"]) == list(rows["measured"])


def test_a_model_whose_units_the_timeline_cannot_place_is_refused_before_measuring(tmp_path):
    # gpt's root holds its embeddings and LayerNorms, between the Linears in backward order:
    # refused by name before a testbed starts (nothing written), not after every rate.
    with pytest.raises(ValueError, match="model='gpt' is not allowed.*not consecutive"):
        validate_fsdp_sweep(tmp_path / "out", ["1gbit"], ["fsdp"], "gpt", progress=False)
    assert not (tmp_path / "out").exists()


def test_validate_fsdp_predicts_every_method_with_the_lambda_of_the_other_rates(tmp_path):
    # The committed FSDP run of 2026-11-25, predicted again (every planned row measured, so
    # nothing is run): each rate's compute slowdown lambda is the one that fits the other
    # rates' runs of FSDP's own reduce-scatter (the uncompressed runs there: no "none"),
    # applied to every method and stated.
    import shutil
    from pathlib import Path

    from gradcomp.evaluation.benches import collective, hookpath, train_fsdp
    from gradcomp.evaluation.common.store import ResultTable
    from gradcomp.evaluation.common.units import format_rate
    from gradcomp.evaluation.testbed.validate_fsdp import (collective_sizes, paths,
                                                           planned_keys, predict_rate)

    source = Path(__file__).parent.parent / "benchmarks/results/testbed-fsdp-2026-11-25-weighted"
    for name in source.iterdir():
        if not name.name.startswith("validation"):
            shutil.copy(name, tmp_path)
    spec = train_fsdp.make_spec("mlp", None, 2, 10)
    sizes = units("mlp", None)
    planned = planned_keys(train_fsdp.DEFAULT_METHODS, spec, 2, collective_sizes(sizes, 2),
                           codec_sizes(sizes, 2))
    rates = (100e6, 500e6, 1e9, 2.5e9)
    key_columns = {"collective": collective.KEY_COLUMNS, "train": train_fsdp.KEY_COLUMNS,
                   "codec": hookpath.KEY_COLUMNS}
    for rate in rates:  # all measured: validate only predicts
        files = paths(tmp_path, rate, "mlp", 64)
        assert files["profile"].exists()
        for table, keys in planned.items():
            assert keys <= ResultTable(files[table], key_columns[table]).done_keys()
    rows = validate_fsdp_sweep(tmp_path, [format_rate(r) for r in rates], progress=False)
    lambdas = rows.drop_duplicates("rate_bps").set_index("rate_bps")["compute_slowdown"]
    every = {"collective": None, "train": None, "codec": None}
    for rate in rates:
        others = [r for r in rates if r != rate]
        expected = predict_rate(tmp_path, rate, every, spec, sizes, lambdas[rate])
        here = rows[rows["rate_bps"] == rate].reset_index(drop=True)
        assert list(here["predicted"]) == pytest.approx(list(expected["predicted"]), rel=1e-12)
        assert set(here["slowdown_source"]) == {
            "fitted to the fsdp runs at " + ", ".join(map(format_rate, others))}
    assert lambdas.max() > 1  # applied: some rate's compute is slowed
    md = (tmp_path / "validation.md").read_text()
    assert "Compute slowdown lambda, applied to every method: 100 Mbit/s " \
        f"{lambdas[100e6]:.3f} (fitted to the fsdp runs at 500 Mbit/s" in md
