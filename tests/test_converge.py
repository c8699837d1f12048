"""The convergence benchmark (one CI-sized sweep of every method, with and without error
feedback, in one spawn of 2 gloo ranks), time to accuracy, advise with convergence data, the
report section, the notebook section and the CLI."""
import json
import math
import shutil
import sys

import pandas as pd
import pytest

import gradcomp
from gradcomp import cli
from gradcomp.compressors import option_names
from gradcomp.evaluation.analyses.advise import advise, verdict
from gradcomp.evaluation.analyses.evidence import evidence_of
from gradcomp.evaluation.analyses.time_to_accuracy import time_to_accuracy, tta_verdict, unreached
from gradcomp.evaluation.benches import converge
from gradcomp.evaluation.benches.converge import (AGGRESSIVE, CONVERGE, KEY_COLUMNS, QUICK,
                                                  bench_converge, curve_path, load_curves)
from gradcomp.evaluation.workloads.load import load_workload
from gradcomp.evaluation.common.store import ResultTable
from gradcomp.evaluation.model.cost_tables import cost_table
from gradcomp.evaluation.model.methods import resolve
from gradcomp.evaluation.model.network import Network
from gradcomp.evaluation.model.timeline import predict
from gradcomp.evaluation.report.converge_report import TTA, convergence_section

QUICK_ARGS = dict(seeds=QUICK["seeds"], max_iters=QUICK["max_iters"],
                  eval_every=QUICK["eval_every"])


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The CI-sized default sweep (every method x error feedback, seed 0, teacher task)."""
    out = tmp_path_factory.mktemp("converge") / CONVERGE
    frame = bench_converge(out=out, **QUICK_ARGS)
    return out, frame


@pytest.fixture(scope="module")
def section(sweep):
    """The report's convergence section of the sweep (resnet50, 8 workers, 10 Gbit/s, assumed
    codec costs): (its lines, its table), its table and figures written beside the sweep."""
    out, _ = sweep
    assumed = cost_table("assumed")
    return convergence_section(out.parent, "resnet50", dict(workers=8, bandwidth="10gbit"),
                               assumed, evidence_of(assumed))


def one(frame, method, ef, **options):
    rows = frame[(frame["method"] == method) & (frame["error_feedback"] == ef)]
    rows = rows[[all(json.loads(o).get(k) == v for k, v in options.items())
                 for o in rows["options"]]]
    assert len(rows) == 1, (method, ef, options)
    return rows.iloc[0]


def test_sweep_runs_every_method_with_and_without_error_feedback(sweep):
    out, frame = sweep
    expected = {(m, ef) for m in gradcomp.names() for ef in (False, True)} - {("none", True)}
    assert set(zip(frame["method"], frame["error_feedback"])) == expected | {
        ("topk", False), ("topk", True)}
    assert len(frame) == len(expected) + 2  # and top-k at 0.1%, both ways
    assert set(frame["seed"]) == {0} and set(frame["task"]) == {"teacher"}
    assert set(frame["target"]) == {0.85} and set(frame["world_size"]) == {2}
    assert frame["torch_version"].notna().all() and frame["date"].notna().all()
    # The hook's bytes: the whole 5.5k-parameter model is one DDP bucket.
    params = int(frame["params"].iloc[0])
    for method, options in [("none", {}), ("fp16", {}), ("topk", {"ratio": 0.01}), AGGRESSIVE,
                            ("signsgd", {})]:
        row = one(frame, method, False, **options)
        wire = gradcomp.compressor(method, **options).wire_nbytes(params)
        assert row["bytes_sent_per_iter"] == wire
        assert row["bytes_original_per_iter"] == 4 * params


def test_none_reaches_the_target_and_aggressive_compression_needs_error_feedback(sweep):
    _, frame = sweep
    none = one(frame, "none", False)
    assert none["reached"] and none["iterations_to_target"] < QUICK["max_iters"]
    # Top-k at 0.1% without error feedback falls far short; with it, far closer.
    plain, fed = one(frame, "topk", False, ratio=0.001), one(frame, "topk", True, ratio=0.001)
    assert not plain["reached"]
    assert fed["final_test_loss"] < plain["final_test_loss"]
    assert fed["best_accuracy"] > plain["best_accuracy"] + 0.1
    # signSGD's unit-size steps do not reach the target; with error feedback they do.
    assert not one(frame, "signsgd", False)["reached"] and one(frame, "signsgd", True)["reached"]
    # Top-k at 1% reaches it both ways, but needs more iterations than none without feedback.
    plain, fed = one(frame, "topk", False, ratio=0.01), one(frame, "topk", True, ratio=0.01)
    assert plain["iterations_to_target"] > max(fed["iterations_to_target"],
                                               none["iterations_to_target"])


def test_curves_hold_every_evaluation_and_agree_with_the_summary(sweep):
    out, frame = sweep
    curve = load_curves(out)
    for row in frame.itertuples():
        points = curve[(curve["method"] == row.method) & (curve["options"] == row.options)
                       & (curve["error_feedback"] == row.error_feedback)]
        expected = list(range(10, row.iterations_run + 1, 10))
        if row.iterations_run % 10:
            expected.append(row.iterations_run)
        assert list(points["iteration"]) == expected
        assert points["test_accuracy"].iloc[-1] == row.final_accuracy
        hit = points[points["test_accuracy"] >= row.target]["iteration"]
        assert (row.iterations_to_target == hit.iloc[0]) if row.reached else hit.empty


def test_time_to_accuracy_is_iterations_times_the_predicted_iteration(sweep):
    out, frame = sweep
    table = time_to_accuracy(frame, "resnet50", 8, "10gbit")
    assert len(table) == len(frame)  # one seed: one row per run
    network = Network(8, "10gbit")
    for row in table.itertuples():
        options = {k: v for k, v in json.loads(row.options).items()
                   if k in option_names(row.method)}
        t_iter = predict("resnet50", network, resolve(row.method, error_feedback=
                                                      row.error_feedback, **options)).t_iter_s
        assert row.t_iter_s == pytest.approx(t_iter)
        run = one(frame, row.method, row.error_feedback, **options)
        if run["reached"]:
            assert row.time_to_target_s == pytest.approx(run["iterations_to_target"] * t_iter)
        else:
            assert math.isnan(row.time_to_target_s)
    none = table[table["variant"] == "none"].iloc[0]
    assert none["iterations_vs_none"] == 1 and none["speedup_to_target"] == 1
    reached = table["time_to_target_s"].notna()
    assert reached[:reached.sum()].all()  # the variants that missed come last
    assert list(table["time_to_target_s"][reached]) == sorted(table["time_to_target_s"][reached])


def test_advise_ranks_by_time_to_accuracy_and_names_who_missed(sweep):
    _, frame = sweep
    # Per iteration, signSGD beats uncompressed at 1 Gbit/s ...
    fast = advise("resnet50", 8, "1gbit", methods=["none", "signsgd"])
    assert list(fast["method"]) == ["signsgd", "fp16", "none"]  # the V100 16-bit baseline
    assert "time_to_target_s" not in fast.columns
    # ... but without error feedback it never reaches the target: last, and named.
    table = advise("resnet50", 8, "1gbit", methods=["none", "signsgd"], convergence=frame)
    assert list(table["variant"]) == ["signsgd +EF", "none", "signsgd"]
    assert unreached(table) == ["signsgd"]
    answer = verdict(table)
    assert answer == tta_verdict(table) and answer.startswith("Yes: signsgd +EF")
    assert answer.endswith(f"Did not reach the target within {QUICK['max_iters']} iterations "
                           "on every seed: signsgd.")
    # Over all methods, the fastest per iteration did not converge, so it ranks behind
    # every method that did.
    table = advise("resnet50", 8, "1gbit", convergence=frame)
    fastest = table.sort_values("t_iter_s").iloc[0]
    assert math.isnan(fastest["time_to_target_s"])
    assert fastest["rank"] > table["time_to_target_s"].notna().sum()


def test_resume_skips_finished_runs_and_reruns_only_the_missing_one(sweep, tmp_path,
                                                                    monkeypatch):
    out, frame = sweep
    calls = []
    monkeypatch.setattr(converge, "launch", lambda fn, world, backend, todo, *a:
                        calls.append([key for key, _ in todo]))
    again = bench_converge(out=out, **QUICK_ARGS)
    assert not calls
    pd.testing.assert_frame_equal(again, frame)
    # A copy whose last run was cut off: its curve rows are there, its summary row is not.
    copy = tmp_path / CONVERGE
    lines = out.read_text().splitlines(keepends=True)
    copy.write_text("".join(lines[:-1]))
    shutil.copy(curve_path(out), curve_path(copy))
    bench_converge(out=copy, **QUICK_ARGS)
    assert len(calls) == 1 and len(calls[0]) == 1
    missing = frame.iloc[-1]
    assert calls[0][0]["method"] == missing["method"]
    assert calls[0][0]["error_feedback"] == missing["error_feedback"]
    curve = load_curves(copy)
    assert len(curve.drop_duplicates(subset=list(KEY_COLUMNS))) == len(frame) - 1
    # A repeated curve row (a run measured again after an interruption): the table refuses a
    # key it holds, so the row first measured stays and nothing is stored twice.
    table = ResultTable(curve_path(copy), (*KEY_COLUMNS, "iteration"))
    first = curve.iloc[0].to_dict()
    with pytest.warns(UserWarning):
        assert table.append({**first, "test_accuracy": 0.125}) is False
    again = load_curves(copy)
    assert len(again) == len(curve)
    assert (again["test_accuracy"] == 0.125).sum() == 0


@pytest.mark.parametrize("kwargs, option", [
    (dict(task="mnist"), "task"), (dict(metric="f1"), "metric"), (dict(target=1.5), "target"),
    (dict(metric="loss"), "target"), (dict(max_iters=1), "max_iters"),
    (dict(eval_every=0), "eval_every"), (dict(batch_size=0), "batch_size"),
    (dict(lr=0.0), "lr"), (dict(momentum=1.0), "momentum"), (dict(seeds=[]), "seeds"),
    (dict(seeds=[-1]), "seeds"), (dict(error_feedback=("yes",)), "error_feedback"),
    (dict(error_feedback=()), "error_feedback"), (dict(methods=["zip"]), "zip"),
    (dict(methods=[("topk", {"k": 3})]), "methods"), (dict(methods=[("topk", {"ratio": 2})]),
                                                       "ratio"),
])
def test_bad_options_raise_value_error_naming_the_option(kwargs, option, tmp_path):
    with pytest.raises(ValueError, match=option):
        bench_converge(out=tmp_path / CONVERGE, **kwargs)
    assert not (tmp_path / CONVERGE).exists()


def test_time_to_accuracy_rejects_an_ambiguous_or_unknown_target(sweep):
    _, frame = sweep
    two = pd.concat([frame, frame.assign(target=0.8)], ignore_index=True)
    with pytest.raises(ValueError, match="several targets"):
        time_to_accuracy(two, "resnet50", 8, "10gbit")
    assert set(time_to_accuracy(two, "resnet50", 8, "10gbit", target=0.8)["target"]) == {0.8}
    with pytest.raises(ValueError, match="target=0.9"):
        time_to_accuracy(frame, "resnet50", 8, "10gbit", target=0.9)
    with pytest.raises(ValueError, match="task='digits'"):
        time_to_accuracy(frame, "resnet50", 8, "10gbit", task="digits")


def test_tasks_are_fixed_by_their_seed_and_digits_needs_scikit_learn(monkeypatch):
    from gradcomp.evaluation.workloads.tasks import digits, teacher

    a, b, c = teacher(), teacher(), teacher(data_seed=1)
    assert a.batches(1, 5)[0].equal(b.batches(1, 5)[0]) and a.evaluate(a.model) == b.evaluate(
        b.model)
    assert not a.batches(1, 5)[0].equal(c.batches(1, 5)[0])
    assert not a.batches(0, 5)[0].equal(a.batches(1, 5)[0])  # each rank its own batches
    assert a.batches(0, 7)[1].equal(b.batches(0, 7)[1])  # any step order gives the same
    first = load_workload("teacher", "task", seed=3).model.state_dict()["0.weight"]
    assert first.equal(load_workload("teacher", "task", seed=3).model.state_dict()["0.weight"])
    assert not first.equal(load_workload("teacher", "task", seed=4).model.state_dict()[
        "0.weight"])
    pytest.importorskip("sklearn")
    d = digits(batch_size=8)
    assert d.batches(0, 0)[0].shape == (8, 64) and 0 <= d.batches(0, 0)[0].min()
    assert d.evaluate(d.model)["accuracy"] < 0.5  # untrained, on the 360 test images
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # as if not installed
    with pytest.raises(ValueError, match="scikit-learn"):
        digits()


def test_report_section_shows_who_reaches_the_target_and_the_effect_of_ef(sweep, section):
    out, frame = sweep
    lines, table = section
    text = "\n".join(lines)
    tta = pd.read_csv(out.parent / TTA)
    assert "## Convergence" in text and list(table["variant"]) == list(tta["variant"])
    missed = unreached(tta)
    for variant in missed:  # marked in the table, never recommended by the report
        assert f"| {variant} (not converged) " in text
    assert f"{len(tta) - len(missed)} of {len(tta)} variants" in text
    assert "| topk(ratio=0.001) " in text and "final accuracy" in text
    assert "reaches it only with error feedback" in text  # signsgd
    for png in ("convergence_iterations.png", "iterations_to_target.png"):
        assert png in text and (out.parent / png).stat().st_size > 10_000
    # The task is a proxy: its curves are drawn against its own iterations only, never
    # against the predicted wall time of the profile's workload.
    assert "convergence_time.png" not in text and "wall time" not in text.lower()


def test_notebook_draws_the_convergence_section(sweep, section, tmp_path):
    from test_notebook import execute, images, kernel

    out, _ = sweep
    with kernel() as client:
        outputs = execute(client, tmp_path, out.parent)
    assert images(outputs) == 3  # the model-only speedup curves and two convergence figures
    markdown = [o["data"].get("text/markdown", "") for o in outputs if "data" in o]
    assert any(m.startswith("Yes: ") or m.startswith("No") for m in markdown)


def test_cli_bench_converge_resumes_and_advise_ranks_by_time_to_accuracy(sweep, capsys,
                                                                         monkeypatch):
    out, frame = sweep
    calls = []
    monkeypatch.setattr(converge, "launch", lambda fn, world, backend, todo, *a:
                        calls.append(todo))
    assert cli.main(["bench", "converge", "--quick", "--out", str(out), "--json"]) == 0
    assert not calls and len(json.loads(capsys.readouterr().out)) == len(frame)
    budget = QUICK["max_iters"]
    cli.main(["bench", "converge", "--seeds", "2", "--max-iters", str(budget), "--methods",
              "none,fp16", "--out", str(out), "--json"])
    planned = [(key["method"], key["error_feedback"], key["seed"], key["max_iters"])
               for key, _ in calls[0]]
    assert planned == [("none", False, 1, budget), ("fp16", False, 1, budget),
                       ("fp16", True, 1, budget)]
    capsys.readouterr()
    assert cli.main(["advise", "--convergence", str(out), "--bandwidth", "1gbit", "--methods",
                     "none,signsgd", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    variants = [r["variant"] for r in answer["ranking"]]  # with the V100's 16-bit baseline
    assert set(variants) == {"signsgd +EF", "none", "signsgd", "fp16", "fp16 +EF"}
    assert variants[0] == "signsgd +EF" and variants[-1] == "signsgd"
    assert "**signsgd +EF**" in answer["verdict"]
    assert "Never recommended, did not reach the target: signsgd." in answer["verdict"]
    assert cli.main(["advise", "--convergence", str(out), "--bandwidth", "1gbit"]) == 0
    assert "time_to_target_s" in capsys.readouterr().out


@pytest.mark.parametrize("argv, option", [
    (["bench", "converge", "--target", "1.5"], "target"),
    (["bench", "converge", "--task", "mnist"], "task='mnist' is not allowed"),
    (["bench", "converge", "--max-iters", "0"], "--max-iters"),
    (["advise", "--convergence", "CONVERGE", "--target", "0.5"], "target=0.5"),
])
def test_cli_bad_convergence_options_are_parser_errors(argv, option, sweep, capsys):
    out, _ = sweep
    with pytest.raises(SystemExit) as exc:
        cli.main([str(out) if a == "CONVERGE" else a for a in argv])
    assert exc.value.code == 2 and option in capsys.readouterr().err
