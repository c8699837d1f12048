"""Evidence weighed (issue 36): every predicted speedup carries an interval from what it rests
on (codec-fit residuals, the seeds' spread of iterations to target, the network fit's
spread); a lossy method is recommended over the 16-bit baseline only when it clears the
margin across its interval, else the baseline is, with what evidence would change it; the
verdict says where the answer flips within 2x of the question."""
import json
import re

import numpy as np
import pandas as pd
import pytest

from gradcomp.compressors import compressor
from gradcomp.evaluation.analyses import weighed
from gradcomp.evaluation.analyses.evidence import evidence_of, network_spread
from gradcomp.evaluation.analyses.recommend import MARGIN, choose, recommend_by_accuracy
from gradcomp.evaluation.analyses.time_to_accuracy import tta_verdict
from gradcomp.evaluation.model.cost_tables import cost_table, measured_table
from gradcomp.evaluation.common.units import parse_rate
from test_cli import run_here
from test_costs_verdict import linear_table

V100 = "NVIDIA V100"
NET = dict(workers=8, bandwidth="10gbit")


def seeded_runs(iterations: dict) -> pd.DataFrame:
    """A `bench converge` summary: {(method, error feedback): [iterations per seed]}."""
    return pd.DataFrame([
        {"task": "cnn", "metric": "accuracy", "target": 0.9, "method": method,
         "options": json.dumps(compressor(method).options()), "error_feedback": ef,
         "seed": seed, "reached": True, "iterations_to_target": float(n), "max_iters": 200,
         "final_accuracy": 0.91, "diverged": False, "bytes_sent_per_iter": 1000.0,
         "ratio": 4.0}
        for (method, ef), counts in iterations.items() for seed, n in enumerate(counts)])


def verdict_of(runs, table=None, net=NET):
    table = table or cost_table("v100")
    evidence = evidence_of(table)
    tta = weighed.accuracy(runs, "resnet50", net, table, evidence)
    return tta, table, recommend_by_accuracy(tta, table, V100, "q", evidence)


def test_a_lossy_method_whose_interval_overlaps_the_16_bit_baseline_is_not_recommended():
    # terngrad +EF is fastest by the point estimate (fewer iterations, a faster iteration),
    # but its seeds overlap fp16's: its lower bound is below 1.05x, so fp16 is the answer.
    runs = seeded_runs({("none", False): [60, 70, 80], ("fp16", False): [60, 70, 80],
                        ("terngrad", True): [60, 66, 80]})
    tta, table, line = verdict_of(runs)
    row = tta.set_index("variant").loc["terngrad +EF"]
    assert tta.iloc[0]["variant"] == "terngrad +EF"  # fastest by the point estimate
    assert row["vs_16bit_low"] < 1 + MARGIN <= row["vs_16bit"] < row["vs_16bit_high"]
    assert choose(tta, table, V100).row["variant"] == "fp16"
    assert "**fp16 all-reduce**" in line and "**terngrad +EF**" not in line
    assert "Faster by the point estimate but not recommended: terngrad +EF, " \
           f"{row['vs_16bit']:.2f}x ({row['vs_16bit_low']:.2f}-{row['vs_16bit_high']:.2f}x) " \
           "sooner than the fp16 all-reduce" in line
    assert "at least 1.05x sooner than the 16-bit baseline" in line and "margin 5%" in line
    assert "terngrad +EF would need a lower bound above 1.05x: more seeds" in line
    assert "Intervals from: codec costs of table `v100`" in line
    assert "iterations to target over 3 seed(s), min-max" in line
    # A gain the point estimate itself puts below the margin: more evidence would not help.
    same = seeded_runs({("none", False): [70] * 3, ("fp16", False): [70] * 3,
                        ("terngrad", True): [70] * 3})
    tta, table, line = verdict_of(same)
    assert tta.iloc[0]["variant"] == "terngrad +EF" and "**fp16 all-reduce**" in line
    assert re.search(r"its point estimate \(1\.0\dx\) is itself below 1\.05x", line)


def test_a_lossy_method_that_clears_the_margin_across_its_interval_is_recommended():
    runs = seeded_runs({("none", False): [70, 70, 72], ("fp16", False): [70, 70, 72],
                        ("terngrad", True): [40, 42, 44]})
    tta, table, line = verdict_of(runs)
    row = tta.set_index("variant").loc["terngrad +EF"]
    assert row["vs_16bit_low"] >= 1 + MARGIN
    assert "**terngrad +EF**" in line and "It clears the margin: at least " \
           f"{row['vs_16bit_low']:.2f}x sooner than the fp16 all-reduce" in line
    # the interval spans the seeds' spread and the codec fits' residuals
    assert row["time_to_target_low_s"] < row["time_to_target_s"] < row["time_to_target_high_s"]
    assert row["time_to_target_low_s"] <= 40 * row["t_iter_s"]
    assert row["time_to_target_high_s"] >= 44 * row["t_iter_s"]
    assert f"{row['speedup_to_target']:.2f}x ({row['speedup_to_target_low']:.2f}-" \
           f"{row['speedup_to_target_high']:.2f}x) sooner than fp32 DDP" in line
    fp16 = tta.set_index("variant").loc["fp16"]
    assert fp16["vs_16bit"] == fp16["vs_16bit_low"] == fp16["vs_16bit_high"] == 1.0
    assert f"{row['speedup_to_target']:.2f}x (interval {row['speedup_to_target_low']:.2f}-" \
           f"{row['speedup_to_target_high']:.2f}x) sooner than uncompressed" in tta_verdict(tta)


def test_without_spread_the_interval_is_the_point_and_codec_residuals_widen_it():
    exact = measured_table(pd.concat([linear_table("fp16", noise=0), linear_table("topk",
                                                                                  noise=0)]))
    noisy = measured_table(pd.concat([linear_table("fp16", noise=0.3, seed=3),
                                      linear_table("topk", noise=0.3, seed=4)]))
    for table, wide in ((exact, False), (noisy, True)):
        ranking = weighed.ranking("resnet50", dict(workers=8, bandwidth="1gbit"), table,
                                  evidence_of(table), ["fp16", "topk"])
        topk = ranking.set_index("method").loc["topk"]
        width = (topk["speedup_high"] - topk["speedup_low"]) / topk["speedup"]
        assert topk["speedup_low"] <= topk["speedup"] * (1 + 1e-12) and \
            topk["speedup"] <= topk["speedup_high"] * (1 + 1e-12)
        assert (width > 1e-3) == wide and (width < 1e-9) == (not wide)
        assert (topk["t_iter_high_s"] - topk["t_iter_low_s"] > 1e-6) == wide
        assert topk["codec_spread"] == pytest.approx(
            max(f.worst_rel for (m, _), f in table.fits.items() if m == "topk"))


def test_the_network_fits_spread_widens_the_interval():
    sizes = [2**k for k in range(10, 27, 2)]
    rng = np.random.default_rng(0)

    def collectives(noise):
        return pd.DataFrame([dict(collective="allreduce", world_size=2, nbytes=n,
                                  time_s=(1e-4 + n * 8 / 5e9) * (1 + noise * rng.normal()))
                             for n in sizes])

    assert network_spread(collectives(0.0)) < 1e-6
    small, large = network_spread(collectives(0.02)), network_spread(collectives(0.2))
    assert 0 < small < large
    table = cost_table("v100")
    plain = weighed.ranking("resnet50", NET, table, evidence_of(table), ["topk"])
    spread = weighed.ranking("resnet50", NET, table, evidence_of(table, large, "fitted"),
                             ["topk"])
    a, b = plain.set_index("method").loc["topk"], spread.set_index("method").loc["topk"]
    assert b["speedup_low"] < a["speedup_low"] and b["speedup_high"] > a["speedup_high"]
    assert a["speedup"] == pytest.approx(b["speedup"])


def test_the_verdict_says_where_the_answer_flips_within_2x():
    # 67 against 70 iterations: terngrad +EF clears the margin at 8 workers, not at 16,
    # where its all-gather has grown.
    runs = seeded_runs({("none", False): [70] * 3, ("fp16", False): [70] * 3,
                        ("terngrad", True): [67] * 3})
    table = cost_table("v100")
    evidence = evidence_of(table)
    tta = weighed.accuracy(runs, "resnet50", NET, table, evidence)
    assert choose(tta, table, V100).row["variant"] == "terngrad +EF"
    text = weighed.accuracy_flips(runs, tta, "resnet50", NET, table, evidence)
    assert text.startswith("Where the answer flips (searched 4-16 workers and 5 Gbit/s to "
                           "20 Gbit/s")
    workers = re.search(r"fp16 all-reduce at (\d+) workers", text)
    assert workers and 8 < int(workers.group(1)) <= 16
    there = weighed.accuracy(runs, "resnet50", {**NET, "workers": int(workers.group(1))},
                             table, evidence)
    assert choose(there, table, V100).row["variant"] == "fp16"
    before = weighed.accuracy(runs, "resnet50", {**NET, "workers": int(workers.group(1)) - 1},
                              table, evidence)
    assert choose(before, table, V100).row["variant"] == "terngrad +EF"
    line = recommend_by_accuracy(tta, table, V100, "q", evidence, text)
    assert line.endswith(text)
    # no flip: the same answer at every point searched
    held = weighed.accuracy_flips(seeded_runs({("none", False): [70] * 3,
                                               ("fp16", False): [70] * 3}),
                                  tta, "resnet50", NET, table, evidence)
    assert held.startswith("The answer holds over 4-16 workers and 5 Gbit/s to 20 Gbit/s")
    assert parse_rate("20gbit") == 2 * parse_rate(NET["bandwidth"])


def test_advise_json_and_table_carry_intervals_margin_and_evidence(tmp_path):
    runs = seeded_runs({("none", False): [60, 70, 80], ("fp16", False): [60, 70, 80],
                        ("terngrad", True): [60, 66, 80]})
    runs.to_csv(tmp_path / "converge.csv", index=False)
    argv = ["advise", "--convergence", str(tmp_path / "converge.csv"), "--methods",
            "none,fp16,terngrad"]
    out = run_here(*argv, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["margin"] == MARGIN and data["evidence"]["network_source"] == "stated"
    assert data["evidence"]["codec_table"].startswith("`v100`")
    assert {"fp16", "terngrad"} <= set(data["evidence"]["codec_spread"])
    for row in data["ranking"]:
        assert row["speedup_to_target_low"] <= row["speedup_to_target"] \
            <= row["speedup_to_target_high"]
        assert row["vs_16bit_low"] <= row["vs_16bit"] <= row["vs_16bit_high"]
    assert "**fp16 all-reduce**" in data["verdict"] and "Intervals from: " in data["verdict"]
    text = run_here(*argv).stdout
    assert re.search(r"terngrad \+EF .* \d\.\d+ \(\d\.\d+-\d\.\d+\)", text)


def test_the_flip_search_summarises_the_convergence_table_once(monkeypatch):
    # Each point searched prices the variants 3-7 times (`evidence.weigh`): the seeds are
    # summarised per variant once for all of them, and the answers are those of the table.
    from gradcomp.evaluation.analyses import time_to_accuracy as tta_module

    runs = seeded_runs({("none", False): [70] * 3, ("fp16", False): [70] * 3,
                        ("terngrad", True): [67] * 3})
    table = cost_table("v100")
    evidence = evidence_of(table)
    tta = weighed.accuracy(runs, "resnet50", NET, table, evidence)
    once = weighed.accuracy(tta_module.variants(runs), "resnet50", NET, table, evidence)
    pd.testing.assert_frame_equal(once, tta)
    summarised, per_variant = [], tta_module.per_variant
    monkeypatch.setattr(tta_module, "per_variant",
                        lambda rows: summarised.append(len(rows)) or per_variant(rows))
    text = weighed.accuracy_flips(runs, tta, "resnet50", NET, table, evidence)
    assert summarised == [9]  # the three variants' seeds, once
    assert re.search(r"fp16 all-reduce at (\d+) workers", text)
    assert weighed.accuracy(runs, "resnet50", NET, table, evidence).equals(tta)
    assert len(summarised) == 2  # one pricing: summarised once, not per `weigh` call
