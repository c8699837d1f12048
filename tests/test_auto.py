"""The `auto` hook's choice (schedule, model fit, decisions, drift, checkpoints) and its
convergence guard without processes, its residual hand-over, reports, PowerSGD's work between
rounds and the guard in one process, and its options. Two real gloo ranks:
tests/test_hooks_distributed.py."""
import json

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp
import gradcomp.comm
from gradcomp.comm.auto.choice import Chooser, Sample, Transfer, fit_network
from gradcomp.comm.auto import stream
from gradcomp.comm.auto.guard import Guard

ALLREDUCE, ALLGATHER = Transfer("allreduce"), Transfer("allgather")


def same(values):  # the all-reduce of one rank
    return values


def chooser(**options):
    return Chooser([ALLREDUCE, ALLGATHER], workers=4, start=1, explore_iters=3, **options)


def feed(ch, iterations, alpha, x, codec, nbytes):
    """Samples as the hook would record them: bucket b with candidate c costs codec[b][c] plus
    the model's communication time at (alpha, x); every bucket's link idle."""
    for i in iterations:
        for b in range(len(codec)):
            c = ch.choice(b, i)
            if ch.measured(i):
                steps, per_byte = ch.transfers[c].factors(ch.workers)
                ch.samples.append(Sample(i, b, c, codec[b][c],
                                         steps * alpha + per_byte * nbytes[b][c] * x,
                                         nbytes[b][c], True, ch.warmup(i)))


def test_the_schedule_explores_each_candidate_then_uses_the_decisions():
    ch = chooser()
    assert [ch.choice(0, i) for i in range(1, 7)] == [0, 0, 0, 1, 1, 1]
    assert [ch.warmup(i) for i in range(1, 7)] == [True, False, False, True, False, False]
    ch.decisions = {0: 1}
    assert ch.choice(0, 7) == 1 and ch.choice(5, 7) == 0  # an unknown bucket: the first


def test_a_candidate_that_cannot_win_ends_its_exploration_after_its_warm_up():
    """Top-k explored first (the hook orders the most compressing first); then, on a slow
    link, the uncompressed candidate's warm-up alone communicates longer than top-k's whole
    bucket time: its other iterations are skipped and it is priced from the warm-up. On a
    fast link it is explored in full."""
    codec, nbytes = [[0.0, 40e-3]], [[1.6e7, 3.4e5]]
    for x, explored, decided_at in ((8e-8, [1, 1, 1, 0], 5), (1e-10, [1, 1, 1, 0, 0, 0], 7)):
        ch = Chooser([ALLREDUCE, ALLGATHER], workers=2, explore_iters=3, order=[1, 0])
        seen, i = [], 1
        while ch.decided_at is None:
            ch.step(i, same)
            if ch.exploring(i):
                seen.append(ch.choice(0, i))
                feed(ch, [i], alpha=1e-4, x=x, codec=codec, nbytes=nbytes)
            i += 1
        assert seen == explored and ch.decided_at == decided_at
        assert ch.predict(0, 0) == pytest.approx(2 * 1e-4 + 1.6e7 * x)  # the warm-up's price
        assert ch.decisions == {0: 1 if x > 1e-9 else 0}


def test_close_candidates_take_turns_and_the_decision_takes_the_medians_of_all_turns():
    """Top-k's (1) scan falls into a busy stretch (+1.5 ms of codec) and prices it 12% over
    the all-reduce (0), which it beats by 13% on a quiet machine: decided after the scan
    alone, the all-reduce would win. Priced within the margin, both carry the bucket in turns, 5
    rounds of two iterations each, in an order rotated every round; the decision, from the
    medians over all their samples, is top-k. A resumed chooser keeps the turns; a clear
    winner decides after the scan."""
    codec, nbytes = [[0.0, 4e-3]], [[4e5, 4e4]]  # 6.0 ms and 5.2 ms at x = 1e-8, 4 workers
    ch = chooser()
    seen, changed, i = [], [], 1
    while ch.decided_at is None:
        if ch.step(i, same):
            changed.append(i)
        if i == 10:
            resumed = chooser()
            resumed.load_state_dict(ch.state_dict())
            assert [resumed.choice(0, j) for j in range(10, 27)] == [ch.choice(0, j)
                                                                     for j in range(10, 27)]
        seen.append(ch.choice(0, i))
        busy = [[0.0, 5.5e-3 if i <= 6 else 4e-3]]
        feed(ch, [i], alpha=0.0, x=1e-8, codec=busy, nbytes=nbytes)
        i += 1
    assert ch.contenders == [0, 1] and ch.confirm_start == 7
    turns = [0, 1, 1, 0, 0, 1, 1, 0, 0, 1]
    assert seen == [0, 0, 0, 1, 1, 1] + [c for c in turns for _ in (0, 1)] + [1]  # decided
    assert ch.decided_at == 27 and changed == [27] and ch.decisions == {0: 1}
    assert ch.codec[0, 1] == pytest.approx(4e-3)  # median of 2 busy and 5 quiet samples
    clear = chooser()
    feed(clear, range(1, 7), alpha=0.0, x=1e-8, codec=codec, nbytes=[[4e7, 4e4]])
    assert clear.step(7, same) and clear.decided_at == 7 and clear.contenders == []


def test_the_rounds_iteration_times_decide_between_close_contenders():
    """Per bucket, top-k (1) is priced 13% under the all-reduce (0), within the margin, but
    the iterations top-k carries take 10% longer (what its codec costs the compute beside it,
    which the bucket's price does not hold): timed, the rounds decide for the all-reduce;
    untimed, the table decides for top-k. A re-pricing (the link 25% slower) keeps the timed
    choice while the two stay within the margin; a link 10x slower, on which top-k is
    clearly best, proposes top-k, and its trial (top-k's iterations now the shorter) moves
    it."""
    codec, nbytes = [[0.0, 4e-3]], [[4e5, 4e4]]  # 6.0 ms and 5.2 ms at x = 1e-8, 4 workers
    runs = {}
    for timed in (False, True):
        ch = chooser(check_every=5, slowdown=None, confirm_margin=0.5)
        clock, i = 0.0, 1
        while ch.decided_at is None:
            ch.step(i, same, mark=clock if timed else None)
            clock += 0.22 if ch.choice(0, i) == 1 else 0.20
            feed(ch, [i], alpha=0.0, x=1e-8, codec=codec, nbytes=nbytes)
            i += 1
        runs[timed] = ch
    assert runs[False].decisions == {0: 1} and runs[False].rounds == {}
    ch = runs[True]
    assert ch.contenders == [0, 1] and ch.decisions == {0: 0}
    assert ch.rounds == pytest.approx({0: 0.20, 1: 0.22})
    seen = []
    for j in range(i, i + 44):
        ch.step(j, same, mark=clock)
        seen.append((ch.decisions[0], ch.x))
        slower = 1.25e-8 if j < i + 10 else 1e-7
        clock += (0.22 + 0.016) if ch.choice(0, j) == 1 else (0.20 + 0.06 * (slower > 2e-8))
        feed(ch, [j], alpha=0.0, x=slower, codec=codec, nbytes=nbytes)
    # re-priced to the slower link (7.2-7.5 ms against 5.4-5.5 ms): kept
    assert any(d == 0 and 1.15e-8 < x <= 1.25e-8 for d, x in seen)
    assert seen[-1] == (1, pytest.approx(1e-7))  # 60 ms against 16 ms, tried: taken
    assert ch.last_trial[1:] == pytest.approx((0.26, 0.236, True))
    again = chooser()
    again.load_state_dict(ch.state_dict())
    assert again.rounds == ch.rounds


def test_contenders_clearly_behind_leave_the_rounds_and_the_close_ones_race_on():
    """Three contenders whose iterations vary by +-15% around 200, 206 and 300 ms (every
    contender the same pattern, so each median is its base): after the first 5 rounds the
    slowest, 2 standard errors behind, leaves; the two 3% apart go on, 5 rounds at a time,
    to 20, and the faster by the medians of all its turns is taken, though the table prices
    the other first. A chooser resumed mid-race goes on the same way."""
    ch = Chooser([ALLREDUCE, ALLGATHER, ALLREDUCE], workers=4, explore_iters=3,
                 confirm_margin=1e9, slowdown=None)
    base, pattern, carried = (0.200, 0.206, 0.300), (0.85, 1.15, 1.0, 0.9, 1.1), [0, 0, 0]
    clock, stages, i = 0.0, [], 1
    while ch.decided_at is None:
        ch.step(i, same, mark=clock)
        if ch.confirm_start not in (None, *stages):
            stages.append(ch.confirm_start)
            assert ch.contenders == ([0, 1, 2] if len(stages) == 1 else [0, 1])
        if i == 50:
            resumed = Chooser([ALLREDUCE, ALLGATHER, ALLREDUCE], workers=4, explore_iters=3,
                              confirm_margin=1e9, slowdown=None)
            resumed.load_state_dict(ch.state_dict())
            assert resumed.turn_times == ch.turn_times and len(ch.turn_times[2]) == 5
            assert [resumed.choice(0, j) for j in range(50, 100)] == [ch.choice(0, j)
                                                                     for j in range(50, 100)]
        c = ch.choice(0, i)
        clock += base[c] * pattern[carried[c] % 5]
        carried[c] += 1
        feed(ch, [i], alpha=0.0, x=1e-8, codec=[[4e-3, 0.0, 4e-3]],
             nbytes=[[4e5, 4e4, 4e4]])
        i += 1
    # the scan 1-9; 3 contenders x 5 rounds of two iterations from 10; then 2 x 5 x 2 each
    assert stages == [10, 40, 60, 80] and ch.decided_at == 100
    assert {c: len(t) for c, t in ch.turn_times.items()} == {0: 20, 1: 20, 2: 5}
    assert ch.rounds == pytest.approx(dict(enumerate(base)))
    assert min(range(3), key=lambda c: ch.predict(0, c)) == 1 and ch.decisions == {0: 0}


def test_a_checkpoint_from_before_the_race_goes_on_with_its_rounds():
    """Saved in the rounds before they raced (no stage in its state): the resumed chooser
    runs them to their end as they were, where the one saved then would have decided."""
    codec, nbytes = [[0.0, 4e-3]], [[4e5, 4e4]]
    ch = chooser()
    for i in range(1, 12):
        ch.step(i, same)
        feed(ch, [i], alpha=0.0, x=1e-8, codec=codec, nbytes=nbytes)
    assert ch.confirm_start == 7 and ch.explore_end == 27
    old = {k: v for k, v in ch.state_dict().items()
           if k not in ("stage_rounds", "rounds_done", "turn_times")}
    resumed = chooser()
    resumed.load_state_dict(old)
    assert resumed.explore_end == 27
    assert [resumed.choice(0, j) for j in range(12, 28)] == [ch.choice(0, j)
                                                             for j in range(12, 28)]


def test_auto_is_settled_after_its_longest_race_or_its_scan_without_rounds():
    assert gradcomp.comm.build_state("auto").settled_by == 1 + 4 * (3 + 2 * 20) + 2
    no_rounds = gradcomp.comm.build_state("auto", confirm_rounds=0)
    assert no_rounds.settled_by == 1 + 4 * 3 + 2


def test_a_mark_is_wanted_only_where_the_rounds_are_timed():
    """`timing` holds at the scan's end (where the rounds may start) and at each round's end,
    nowhere else: marked only there, the rounds time as when marked at every iteration. It
    holds too where skipping the last candidate's exploration ends the scan early (the skip is
    decided in `step`, after the mark is taken)."""
    codec, nbytes = [[0.0, 4e-3]], [[4e5, 4e4]]
    every, wanted = (chooser(check_every=5, slowdown=None, confirm_margin=0.5)
                     for _ in range(2))
    clock, timed = 0.0, []
    for i in range(1, 40):
        if wanted.timing(i):
            timed.append(i)
        every.step(i, same, mark=clock)
        wanted.step(i, same, mark=clock if wanted.timing(i) else None)
        clock += 0.22 if every.choice(0, i) == 1 else 0.20
        for ch in (every, wanted):
            feed(ch, [i], alpha=0.0, x=1e-8, codec=codec, nbytes=nbytes)
    assert every.decided_at == wanted.decided_at == 27 and every.contenders == [0, 1]
    # 5: a skip of the last candidate's exploration after its warm-up (4) would end the scan
    # there; 7: the scan's end; then each of the 20 iterations' ends
    assert timed == [5, *range(7, 28)]
    assert wanted.rounds == every.rounds == pytest.approx({0: 0.20, 1: 0.22})
    assert wanted.decisions == every.decisions == {0: 0}
    # the all-reduce (0) explored last, its warm-up (4) hopeless: the scan ends at 5
    skipping = Chooser([ALLREDUCE, ALLGATHER], workers=2, explore_iters=3, order=[1, 0],
                       confirm_margin=1e9)
    timed, i = [], 1
    while skipping.decided_at is None:
        if skipping.timing(i):
            timed.append(i)
        skipping.step(i, same, mark=float(i) if skipping.timing(i) else None)
        feed(skipping, [i], alpha=1e-4, x=8e-8, codec=[[0.0, 40e-3]], nbytes=[[1.6e7, 3.4e5]])
        i += 1
    # alike, neither leaves the rounds: they go on in stages of 5 rounds to 20 (the last
    # from 65), every iteration's end marked
    assert skipping.confirm_start == 65 and timed == list(range(5, 86))
    assert skipping.rounds == {0: 1.0, 1: 1.0}  # every round timed


def test_the_network_fit_recovers_latency_and_bandwidth():
    points = [(6, b, 6 * 50e-6 + b * 1e-9) for b in (1e3, 1e5, 1e7)]
    alpha, x = fit_network(points)
    assert alpha == pytest.approx(50e-6) and x == pytest.approx(1e-9)
    assert fit_network([]) == (0.0, 0.0)
    assert min(fit_network([(6, 1e6, 1e-3), (6, 2e6, 0.5e-3)])) >= 0  # never negative


def test_each_bucket_takes_the_candidate_of_least_predicted_time():
    ch = chooser()
    # bucket 0: big (compression pays on a slow link); bucket 1: tiny (latency-bound)
    codec = [[0.0, 2e-3], [0.0, 1e-3]]
    nbytes = [[4e7, 4e5], [4e3, 4e2]]
    feed(ch, range(1, 7), alpha=20e-6, x=1e-8, codec=codec, nbytes=nbytes)
    assert ch.step(7, same)
    assert ch.decisions == {0: 1, 1: 0}
    assert ch.alpha == pytest.approx(20e-6) and ch.x == pytest.approx(1e-8)


def test_a_candidate_left_unmeasured_is_never_chosen():
    ch = chooser()  # as after a resume in the middle of the exploration: candidate 0 unseen
    feed(ch, range(4, 7), alpha=20e-6, x=1e-8, codec=[[0.0, 2e-3]], nbytes=[[4e3, 4e5]])
    ch.step(7, same)
    assert ch.decisions == {0: 1}


def test_a_faster_network_is_noticed_and_the_decision_follows():
    ch = chooser(check_every=5)
    codec, nbytes = [[0.0, 2e-3]], [[4e7, 4e5]]
    feed(ch, range(1, 7), alpha=20e-6, x=1e-8, codec=codec, nbytes=nbytes)
    ch.step(7, same)
    assert ch.decisions == {0: 1}
    feed(ch, range(7, 12), alpha=20e-6, x=1e-8, codec=codec, nbytes=nbytes)
    assert not ch.step(12, same)  # nothing moved
    feed(ch, range(12, 17), alpha=20e-6, x=1e-11, codec=codec, nbytes=nbytes)
    assert not ch.step(17, same) and ch.trial.proposed == {0: 0}  # 1000x the bandwidth
    changed = []
    for i in range(17, 39):  # tried from 18 to 37, untimed: the table's word
        if i > 17 and ch.step(i, same):
            changed.append(i)
        feed(ch, [i], alpha=20e-6, x=1e-11, codec=codec, nbytes=nbytes)
    assert changed == [38] and ch.decisions == {0: 0} and ch.trial is None


CODEC, NBYTES = [[0.0, 2e-3]], [[4e7, 4e5]]  # uncompressed, or 100x less after 2 ms


def decided(x, **options):
    """A chooser of one bucket (`CODEC`, `NBYTES`) that decided at 7, the link at `x`
    seconds per byte; and the reductions its steps run: (blocking, launched), each a list
    of the values it was given, and the reduce and launch functions that record them."""
    ch = chooser(**options)
    feed(ch, range(1, 7), alpha=20e-6, x=x, codec=CODEC, nbytes=NBYTES)
    ch.step(7, same)
    blocking, launched = [], []

    def launch(values):
        launched.append(values)
        return lambda: values
    return ch, (blocking, launched), (lambda v: blocking.append(v) or v, launch)


def link_gets_faster(ch, reduce, launch, last: int) -> list[int]:
    """Steps 8..`last` of a decided chooser fed a link 1000x faster from iteration 11 on;
    the iterations at which its decision changed."""
    changed = []
    feed(ch, [7], alpha=20e-6, x=1e-8, codec=CODEC, nbytes=NBYTES)
    for i in range(8, last + 1):
        if ch.step(i, reduce, launch):
            changed.append(i)
        feed(ch, [i], alpha=20e-6, x=1e-8 if i < 11 else 1e-11, codec=CODEC, nbytes=NBYTES)
    return changed


def test_after_a_decision_no_step_waits_for_the_other_ranks():
    """Decided, every iteration's samples go into a launched reduction (five iterations'
    each) read at the next step; the periodic check decides from those: no blocking reduction
    (each made the rank that came early wait instead of encoding) but the one of a trial's
    verdict, once per trial."""
    ch, (blocking, launched), (reduce, launch) = decided(1e-8, check_every=5)
    assert ch.decisions == {0: 1}
    changed = link_gets_faster(ch, reduce, launch, last=38)
    assert [len(v) for v in blocking] == [10]  # 10 turns timed
    assert [len(v) for v in launched] == [4, 5, 5, 5, 5, 5]  # at 11 (iterations 7-10), 16, ...
    # the faster link, seen at the check at 17, tried from 18 to 37
    assert changed == [38] and ch.decisions == {0: 0}


def test_launching_samples_together_takes_the_decisions_of_one_launch_per_iteration(
        monkeypatch):
    """A settled chooser launches the samples of `SLOWDOWN_EVERY` iterations together (with
    slowdown=None, of `check_every`), at the step before a periodic check among others, so
    each check decides from the samples one launch per step would have given it: the same
    decisions at the same checks. (slowdown=1e9: a slowdown check that never fires.)"""
    runs = {}
    for name, slowdown, every in (("none", None, 5), ("batched", 1e9, 5),
                                  ("per step", 1e9, 1)):
        monkeypatch.setattr(stream, "SLOWDOWN_EVERY", every)
        ch, (blocking, launched), (reduce, launch) = decided(1e-8, check_every=10,
                                                             slowdown=slowdown)
        changed = link_gets_faster(ch, reduce, launch, last=48)
        assert [len(v) for v in blocking] == [10]  # the trial's verdict
        runs[name] = (changed, ch.decisions, ch.x, ch.codec, [len(v) for v in launched])
    # the faster link (from 11), seen at the check at 27 (17's window mostly the old rate),
    # tried from 28 to 47
    assert runs["none"][0] == runs["batched"][0] == runs["per step"][0] == [48]
    assert runs["none"][1:4] == runs["batched"][1:4] == runs["per step"][1:4]
    # launched at 16 (iterations 7-15), 26, 36 and 46; at 11 (7-10), 16, ..., 46; every step
    assert runs["none"][4] == [9, 10, 10, 10] and runs["batched"][4] == [4] + [5] * 7
    assert runs["per step"][4] == [1] * 41


def test_a_slowdown_inside_a_launch_refits_the_bandwidth_from_its_iteration():
    """The link 4x slower from iteration 13, inside the launch of 11-15: read at 17, the
    slowdown check refits the bandwidth from 13 on alone (the new rate, not a mix with 11's
    and 12's), ten iterations before the periodic check at 27."""
    ch, _, (reduce, launch) = decided(1e-8, check_every=20)
    feed(ch, [7], alpha=20e-6, x=1e-8, codec=CODEC, nbytes=NBYTES)
    fits = {}
    for i in range(8, 19):
        ch.step(i, reduce, launch)
        fits[i] = ch.x
        feed(ch, [i], alpha=20e-6, x=1e-8 if i < 13 else 4e-8, codec=CODEC, nbytes=NBYTES)
    assert fits[16] == pytest.approx(1e-8) and fits[17] == pytest.approx(4e-8)


def test_a_codec_time_moves_a_decision_only_when_two_checks_saw_it_move():
    """The chosen candidate's codec 1 s slower for one check's window (a busy machine) leaves
    the decision alone: priced at once it would send the bucket to the uncompressed
    candidate, whose price nothing re-measures before the next exploration. Slower for two
    windows, it proposes the move at the second check (17), taken after its trial (untimed:
    the table's word)."""
    for slow_until, changed in ((12, []), (17, [38])):
        ch = chooser(check_every=5, slowdown=None)  # the periodic check alone
        feed(ch, range(1, 7), alpha=20e-6, x=1e-8, codec=CODEC, nbytes=NBYTES)
        ch.step(7, same)
        assert ch.decisions == {0: 1}
        seen = []
        for i in range(7, 43):
            if i > 7 and ch.step(i, same):
                seen.append(i)
            codec = [[0.0, 2e-3 + (1.0 if i < slow_until else 0.0)]]
            feed(ch, [i], alpha=20e-6, x=1e-8, codec=codec, nbytes=NBYTES)
        assert seen == changed


def test_a_proposal_is_tried_first_and_left_when_its_iterations_take_longer():
    """One iteration's transfer 100x slower (a busy machine) refits the bandwidth and proposes
    top-k (1) for the big bucket; the tiny one stays uncompressed (0). From the next
    iteration the two take turns on the big bucket alone (now, proposed, proposed, now, ...),
    the tiny one keeping its candidate; top-k's iterations take 5% longer (what its codec
    costs the compute beside it), so the decision stays. A chooser resumed in the middle of
    the trial carries the same turns."""
    codec, nbytes = [[0.0, 2e-3], [0.0, 1e-3]], [[4e6, 4e4], [4e3, 4e2]]
    ch = chooser(check_every=10)
    feed(ch, range(1, 7), alpha=20e-6, x=1e-10, codec=codec, nbytes=nbytes)
    ch.step(7, same)
    assert ch.decisions == {0: 0, 1: 0}
    clock, turns, verdicts = 0.0, [], []
    for i in range(7, 60):
        if i > 7:
            ch.step(i, same, mark=clock if ch.timing(i) else None)
        if i == 15:
            resumed = chooser(check_every=10)
            resumed.load_state_dict(ch.state_dict())
            assert [[resumed.choice(b, j) for b in (0, 1)] for j in range(15, 22)] == [
                [ch.choice(b, j) for b in (0, 1)] for j in range(15, 22)]
        if ch.trial is not None and ch.trial.running(i):
            turns.append((ch.choice(0, i), ch.choice(1, i)))
        if ch.last_trial and ch.last_trial not in verdicts:
            verdicts.append(ch.last_trial)
        clock += 0.21 if ch.choice(0, i) == 1 else 0.20
        feed(ch, [i], alpha=20e-6, x=1e-8 if i == 10 else 1e-10, codec=codec, nbytes=nbytes)
    assert turns[:10] == [(0, 0), (1, 0), (1, 0), (0, 0)] * 2 + [(0, 0), (1, 0)]
    assert verdicts[0] == (32, pytest.approx(0.20), pytest.approx(0.21), False)
    assert all(not taken for *_, taken in verdicts)
    assert ch.decisions == {0: 0, 1: 0} and ch.trial is None


def test_a_trials_times_decide_the_next_re_pricing_within_the_margin():
    """The link 3.9x slower from iteration 8: the slowdown check at 9 proposes top-k (1) for
    the big bucket, priced 15% under the all-reduce (0); its trial (10-29) finds top-k's
    iterations 5% longer and keeps the all-reduce. Those times are the rounds from then on:
    the link 23% slower again (from 33) re-prices at the check at 42 (top-k 41% under,
    within the margin of 50%), and the rounds, not a second trial, keep the all-reduce."""
    codec, nbytes = [[0.0, 2e-3], [0.0, 1e-3]], [[4e6, 4e4], [4e3, 4e2]]
    ch = chooser(check_every=5, confirm_margin=0.5)
    feed(ch, range(1, 7), alpha=20e-6, x=1e-10, codec=codec, nbytes=nbytes)
    ch.step(7, same)
    assert ch.decisions == {0: 0, 1: 0} and ch.rounds == {}  # top-k 2.9x: no rounds
    clock, starts = 0.0, []
    for i in range(7, 45):
        if i > 7:
            ch.step(i, same, mark=clock if ch.timing(i) else None)
        if ch.trial is not None and ch.trial.start not in starts:
            starts.append(ch.trial.start)
        clock += 0.21 if ch.choice(0, i) == 1 else 0.20
        x = 1e-10 if i < 8 else 3.9e-10 if i < 33 else 4.8e-10
        feed(ch, [i], alpha=20e-6, x=x, codec=codec, nbytes=nbytes)
    assert starts == [10] and ch.last_trial == (30, pytest.approx(0.20), pytest.approx(0.21),
                                                False)
    assert ch.rounds == pytest.approx({0: 0.20, 1: 0.21})
    assert ch.x == pytest.approx(4.8e-10) and ch.predict(0, 1) < ch.predict(0, 0)  # re-priced
    assert ch.decisions == {0: 0, 1: 0} and ch.trial is None


def test_ranks_that_measured_different_buckets_raise():
    ch = chooser()
    feed(ch, range(1, 7), alpha=0, x=1e-9, codec=[[0, 1e-3]], nbytes=[[1e6, 1e4]])
    other_rank_has_one_more = lambda t: torch.maximum(t, t + 1) if t.dim() == 1 else t  # noqa
    with pytest.raises(RuntimeError, match="different numbers of buckets"):
        ch.step(7, other_rank_has_one_more)


def test_checkpoint_keeps_decisions_and_tables():
    ch = chooser()
    feed(ch, range(1, 7), alpha=20e-6, x=1e-8, codec=[[0.0, 2e-3]], nbytes=[[4e7, 4e5]])
    ch.step(7, same)
    again = chooser()
    again.load_state_dict(ch.state_dict())
    assert again.decisions == ch.decisions and again.predict(0, 1) == ch.predict(0, 1)


@pytest.mark.parametrize("bad, match", [
    (dict(candidates="topk"), "candidates="),
    (dict(candidates=[("topk", "ratio")]), "candidates: "),
    (dict(explore_iters=1), "explore_iters"),
    (dict(confirm_rounds=-1), "confirm_rounds"),
    (dict(confirm_max_rounds=4), r"confirm_max_rounds=4 .* >= confirm_rounds \(5\)"),
    (dict(confirm_max_rounds=True), "confirm_max_rounds"),
    (dict(confirm_margin=-0.1), "confirm_margin"),
    (dict(drift=0), "drift"),
    (dict(check_every=0), "check_every"),
    (dict(slowdown=1), "slowdown"),
    (dict(slowdown="2"), "slowdown"),
])
def test_bad_auto_options_name_the_option(bad, match):
    with pytest.raises(ValueError, match=match):
        gradcomp.comm.AutoState(**bad)


@pytest.fixture(scope="module")
def one_rank_group(tmp_path_factory):
    import torch.distributed as dist

    from gradcomp.evaluation.common.env import end_process_group

    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('pg')}/s",
                            rank=0, world_size=1)
    yield
    end_process_group()  # the tests' hooked DDPs freed first


def test_register_auto_refuses_options_of_a_single_method(one_rank_group):
    ddp = DDP(torch.nn.Linear(4, 4))
    with pytest.raises(TypeError, match="not accepted by 'auto'"):
        gradcomp.comm.register(ddp, "auto", ratio=0.01)
    with pytest.raises(TypeError, match="per candidate"):
        gradcomp.comm.register(ddp, "auto", error_feedback=True)


def test_a_switch_hands_the_residual_to_the_next_candidate(one_rank_group):
    """On one rank the hook's output is what was sent: with top-k + error feedback for 2
    iterations, then the uncompressed candidate, everything the gradients held arrives once
    the residual is handed over (nothing is lost at the switch). Three iterations: the step
    of a fourth could end the exploration early on timings (`SKIP_FACTOR`)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64, bias=False)
    ddp = DDP(model)
    state = gradcomp.comm.register(ddp, "auto", start_iter=0, explore_iters=2, candidates=[
        ("topk", {"ratio": 0.05, "error_feedback": True}), "none"])
    x = torch.randn(16, 64)
    sent, raw = torch.zeros(64, 64), torch.zeros(64, 64)
    for i in range(3):
        plain = torch.autograd.grad(model(x).square().mean(), model.weight)[0]
        ddp.zero_grad()
        ddp(x).square().mean().backward()
        sent += model.weight.grad
        raw += plain
        if i == 1:  # top-k has sent a part and keeps the rest
            assert not torch.allclose(sent, raw, atol=1e-5)
    torch.testing.assert_close(sent, raw, rtol=1e-5, atol=1e-6)
    methods = [r["method"] for r in state.telemetry_rows()]
    assert methods == ["topk", "topk", "allreduce"]
    # the choices as reports give them: every switch, the last one per bucket
    assert state.switches == [(0, 0, "topk"), (2, 0, "none")]  # names, not positions
    # the exploration's end (4) not reached: no decision, and the report says so
    assert state.choices_text() == "bucket 0: none since 2 (exploring, no decision yet)"
    assert state.state_dict()["switches"] == state.switches


def test_auto_options_are_part_of_what_ranks_must_agree_on():
    from gradcomp.comm.agreement import settings

    class DDPBucket:  # what `settings` reads of DDP's GradBucket
        def buffer(self):
            return torch.zeros(8)

        def index(self):
            return 0

    a, b = (gradcomp.comm.AutoState(explore_iters=n) for n in (2, 5))
    assert settings(a, DDPBucket())["hook options"] != settings(b, DDPBucket())["hook options"]


def _linear_auto(iterations: int, **options):
    """(ddp, state, x): auto among none and top-k on one Linear(64, 64) bucket, with
    `options`, after `iterations` backwards of the input x."""
    torch.manual_seed(0)
    ddp = DDP(torch.nn.Linear(64, 64))
    state = gradcomp.comm.register(ddp, "auto", start_iter=0, explore_iters=2,
                                   candidates=["none", ("topk", {"ratio": 0.01})], **options)
    x = torch.randn(16, 64)
    for _ in range(iterations):
        ddp(x).square().mean().backward()
    return ddp, state, x


def test_an_uncompressed_candidate_is_measured_and_can_win(one_rank_group):
    _, state, _ = _linear_auto(6)
    codec = state.chooser.codec
    assert codec and all(v < float("inf") for v in codec.values())
    assert state.chooser.nbytes[0, 0] == 64 * 65 * 4  # the whole bucket, uncompressed


def _spy_marks(monkeypatch) -> dict:
    """iteration -> the mark the hook gave `Chooser.step` (where it gave one)."""
    marks, step = {}, Chooser.step

    def spy(self, iteration, reduce, launch=None, mark=None):
        if mark is not None:
            marks[iteration] = mark
        return step(self, iteration, reduce, launch, mark)
    monkeypatch.setattr(Chooser, "step", spy)
    return marks


def test_the_hook_times_the_confirmation_rounds(one_rank_group, monkeypatch):
    """Every candidate a contender (a margin nothing is outside of): the hook marks each
    round's iterations, and only them (`Chooser.timing`), each with the end of the iteration
    before (when its last bucket was decoded), and the bucket takes the contender whose
    rounds took least time. Trained for its longest exploration (`settled_by`): real
    timings, so the two may race on for up to 20 rounds."""
    ddp, state, x = _linear_auto(0, confirm_margin=1e9)
    marks = _spy_marks(monkeypatch)
    for i in range(state.settled_by):
        ddp(x).square().mean().backward()
    decoded = {r.iteration: r.decoded for r in state.telemetry.records}
    assert all(m == decoded[i - 1] for i, m in marks.items())
    marked = sorted(marks)
    rounds = state.chooser.rounds
    assert state.chooser.decided_at is not None and set(rounds) == {0, 1}
    # from the iteration after the last candidate's warm-up (2), where a skip (timing-
    # dependent) may end the scan, to the rounds' end: the decision; none before or after
    assert marked == list(range(3, state.chooser.decided_at + 1))
    assert all(t > 0 for t in rounds.values())
    assert state.chooser.decisions == {0: min(rounds, key=rounds.get)}


def test_the_hook_times_a_trial_and_reports_its_verdict(one_rank_group, monkeypatch):
    """A proposal set up as a re-pricing would (`Trial`): the hook marks the trial's
    iterations and its end, and only them; the turns take the proposal in the trial's order,
    `decision_text` reports the verdict, and a state pickled in the middle of the trial
    carries it without its marks."""
    import pickle

    from gradcomp.comm.auto.trial import Trial

    ddp, state, x = _linear_auto(6, confirm_margin=0.0)
    chooser = state.chooser
    assert chooser.decided_at is not None and chooser.last_trial is None
    decided, start = chooser.decisions[0], state.iteration + 1
    chooser.trial = Trial(start, {0: 1 - decided}, rounds=2)
    marks, carried = _spy_marks(monkeypatch), []
    for i in range(state.iteration, start + 10):
        if i == start + 1:
            copy = pickle.loads(pickle.dumps(state))
            assert copy.chooser.trial.proposed == {0: 1 - decided}
            assert copy.chooser.trial.marks == {}
        ddp(x).square().mean().backward()
        carried.append(state.telemetry_rows()[-1]["method"])
    assert sorted(marks) == list(range(start, start + 9))  # 4 turns of 2 and the last's end
    proposed = "topk" if decided == 0 else "allreduce"
    assert [c == proposed for c in carried[1:9]] == [False, True, True, False] * 2
    end, now, then, _ = chooser.last_trial
    assert end == start + 8 and now > 0 and then > 0 and chooser.trial is None
    assert f"; trial at {end}: " in state.decision_text()


def test_an_auto_state_pickles_with_a_slowdown_check_in_flight(one_rank_group):
    import pickle

    ddp, state, x = _linear_auto(4, confirm_margin=0.0)  # no rounds: decided at 3 or 4
    for _ in range(5):  # to the step that launches five iterations' samples
        if state.chooser.pending is None:
            ddp(x).square().mean().backward()
    assert state.chooser.decided_at is not None and state.chooser.pending is not None
    copy = pickle.loads(pickle.dumps(state))
    assert copy.chooser.pending is None and copy.chooser.decisions == state.chooser.decisions


class SlowSecondRound(gradcomp.compressors.powersgd.PowerSGD):
    """PowerSGD whose work between its two all-reduces takes 50 ms more."""

    def next_round(self, step, first):
        import time

        time.sleep(0.05)
        return super().next_round(step, first)


def test_work_between_powersgd_rounds_counts_as_codec_not_communication(one_rank_group):
    """The network fit sees only the exchanges: PowerSGD's second round, computed between
    its all-reduces, is codec time (else 50 ms of compute would read as a slow link)."""
    torch.manual_seed(0)
    ddp = DDP(torch.nn.Linear(64, 64, bias=False))
    state = gradcomp.comm.register(ddp, "auto", start_iter=0, explore_iters=2,
                                   candidates=["none", SlowSecondRound(rank=2)])
    x = torch.randn(16, 64)
    for _ in range(5):  # explores 0-1 uncompressed, 2-3 PowerSGD; decides at 4
        ddp(x).square().mean().backward()
    spans = [r["comm_s"] for r in state.telemetry_rows() if r["method"] == "powersgd"]
    assert min(spans) >= 0.05  # what the exchange took, as telemetry shows it
    assert state.chooser.codec[0, 1] >= 0.05  # priced as PowerSGD's codec work
    assert state.chooser.decisions == {0: 0}


# -- the convergence guard --------------------------------------------------------------
def run_guard(norm_of_interval, intervals=4, every=2):
    """A guard fed a bucket whose gradient norm is norm_of_interval(k) in interval k."""
    g = Guard(threshold=0.5, every=every, max_ratio=2.0, start=1)
    for i in range(1, 1 + intervals * every + 1):
        g.step(i, same)
        g.add(0, torch.full((100,), norm_of_interval((i - 1) // every) / 10.0))
    return g


def test_the_guard_engages_while_the_norm_changes_fast_and_not_when_steady():
    steady = run_guard(lambda k: 3.0)
    # the first interval is critical (nothing to compare with), then steady: not
    assert steady.engaged == [(3, [0]), (5, []), (7, []), (9, [])]
    assert not steady.limits(0)
    wobbly = run_guard(lambda k: 3.0 * (1 + 0.3 * (k % 2)))  # +-30%: under threshold 0.5
    assert [c for _, c in wobbly.engaged] == [[0], [], [], []]
    falling = run_guard(lambda k: 3.0 / 4 ** k)  # -75% per interval
    assert falling.engaged == [(3, [0]), (5, [0]), (7, [0]), (9, [0])] and falling.limits(0)
    settles = run_guard(lambda k: 3.0 / 4 ** min(k, 2), intervals=5)
    assert [c for _, c in settles.engaged] == [[0], [0], [0], [], []]


def test_a_guarded_bucket_takes_the_fastest_candidate_within_the_ceiling():
    ch = Chooser([ALLREDUCE, ALLREDUCE, ALLGATHER], workers=4, explore_iters=3)
    # bucket 0 (4 MB): uncompressed, 2x (slowest codec), 100x (fastest overall)
    feed(ch, range(1, 10), alpha=20e-6, x=1e-8, codec=[[0.0, 5e-3, 1e-3]],
         nbytes=[[4e6, 2e6, 4e4]])
    ch.step(10, same)
    assert ch.decisions == {0: 2}
    g = Guard(threshold=0.5, every=2, max_ratio=2.0)
    g.size[0] = 4_000_000
    assert g.choice(ch, 0) == 1  # 2x is within the ceiling and faster than uncompressed
    g.max_ratio = 1.0
    assert g.choice(ch, 0) == 0
    g.max_ratio, ch.nbytes[0, 0] = 1.0, 3e6  # nothing within: the least compressing
    assert g.choice(ch, 0) == 0


@pytest.mark.parametrize("guard, match", [
    ("on", "guard="), ({"eta": 0.5}, "guard="), ({"threshold": 0}, "guard threshold"),
    ({"every": 0}, "guard every"), ({"max_ratio": 0.5}, "guard max_ratio")])
def test_bad_guard_options_name_the_option(guard, match):
    with pytest.raises(ValueError, match=match):
        gradcomp.comm.AutoState(guard=guard)


def test_the_guard_runs_in_the_hook_and_resumes(one_rank_group):
    """Gradients that grow 4x per interval keep the bucket critical: once the decisions say
    top-k (as on a slow link), the guarded hook still sends it uncompressed (top-k is not
    within max_ratio), the unguarded one sends top-k; the checkpoint carries the guard."""
    options = dict(start_iter=0, explore_iters=2,
                   candidates=[("topk", {"ratio": 0.01, "error_feedback": True}), "none"])
    sent = {}
    for guard in (None, {"every": 2, "max_ratio": 2.0}):
        torch.manual_seed(0)
        ddp = DDP(torch.nn.Linear(64, 64, bias=False))
        state = gradcomp.comm.register(ddp, "auto", **options, guard=guard)
        x = torch.randn(16, 64)
        for i in range(9):
            if i == 5:  # decided at 4; now as if the link were slow: top-k is faster
                state.chooser.decisions, state.chooser.x = {0: 0}, 1.0
            (ddp(x).square().mean() * 4.0 ** (i // 2)).backward()
        sent[guard is not None] = [r["method"] for r in state.telemetry_rows()][5:]
    assert sent == {False: ["topk"] * 4, True: ["allreduce"] * 4}
    assert [c for _, c in state.guard.engaged] == [[0], [0], [0], [0]]
    again = gradcomp.comm.build_state("auto", **options, guard={"every": 2, "max_ratio": 2.0})
    again.load_state_dict(state.state_dict())
    assert again.guard.state_dict() == state.guard.state_dict()
    with pytest.raises(ValueError, match="guard"):
        gradcomp.comm.build_state("auto", **options).load_state_dict(state.state_dict())


def test_bench_converge_plans_auto_once_with_its_settings():
    from gradcomp.evaluation.benches.converge import options_text, variants

    assert variants(["none", "auto"]) == [("none", {}, False), ("auto", {}, False)]
    settings = json.loads(options_text("auto", {"explore_iters": 4}, False))
    assert settings["explore_iters"] == 4 and settings["guard"] is None
    assert settings["candidates"][3] == ["topk", {"ratio": 0.01, "error_feedback": True}]


def test_small_transfers_do_not_refit_the_bandwidth():
    """A window of latency-bound transfers (the chosen candidate's few bytes) measured faster
    than the fitted latency says cannot set the bandwidth to infinite (x = 0): the decision
    stays with the compressed candidate."""
    ch = Chooser([ALLREDUCE, Transfer("allreduce", rounds=2)], workers=2, explore_iters=3,
                 check_every=5)
    codec, nbytes = [[0.0, 2e-3]], [[1.6e7, 1.6e5]]
    feed(ch, range(1, 7), alpha=5e-3, x=8e-8, codec=codec, nbytes=nbytes)  # 100 Mbit/s
    ch.step(7, same)
    assert ch.decisions == {0: 1}
    feed(ch, range(7, 12), alpha=1e-3, x=8e-8, codec=codec, nbytes=nbytes)  # latency was less
    ch.step(12, same)
    assert ch.x == pytest.approx(8e-8) and ch.decisions == {0: 1}
