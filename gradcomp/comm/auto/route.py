"""`AutoRoute`: the route that carries each bucket with the candidate `choice` picks, and
`AutoState`, the hook state that holds it."""
from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.distributed as dist

from ...checks import check_int, check_number
from ...compressors import Compressor, TwoRoundCompressor, compressor as build_compressor
from .choice import Chooser, Sample, Transfer
from .guard import Guard, guard_settings
from .trial import TURN
from ..communicators import Bucket, Communicator, build
from ..ranks import Ranks
from ..state import HookState, Route
from ..telemetry import BucketRecord, seconds_between

#: Methods that preserved convergence in gradcomp's measured runs (with error feedback where
#: they need it): uncompressed, 16-bit, PowerSGD, top-k. Top-k and random-k without error
#: feedback, faster per iteration on the testbed, took a median 150 iterations to `bench
#: converge`'s target and never reached it in 600, where these took 60-80
#: (benchmarks/results/auto-cands-2026-11-28).
DEFAULT_CANDIDATES = ("none", "bf16", ("powersgd", {"rank": 4}),
                      ("topk", {"ratio": 0.01, "error_feedback": True}))
#: Iterations after the exploration before its decision acts: the step at iteration i reads
#: the samples reduced at i - 1 (`choice`, "Agreement").
DECISION_LAG = 2
#: The options of `register(ddp_model, "auto", ...)` besides the hook's own.
AUTO_OPTIONS = ("candidates", "explore_iters", "confirm_rounds", "confirm_max_rounds",
                "confirm_margin", "check_every", "redecide_every", "drift", "slowdown", "guard")


def build_candidates(candidates) -> list[Compressor]:
    """Compressors from method names, (name, options) pairs or built compressors."""
    if isinstance(candidates, (str, Compressor)) or not candidates:
        raise ValueError(f"candidates={candidates!r} is not allowed: give a list of methods, "
                         "each a name, a (name, options) pair or a gradcomp compressor")
    built = []
    for c in candidates:
        if isinstance(c, Compressor):
            built.append(c)
        elif isinstance(c, str):
            built.append(build_compressor(c))
        elif isinstance(c, (tuple, list)) and len(c) == 2 and isinstance(c[1], dict):
            built.append(build_compressor(c[0], **c[1]))
        else:
            raise ValueError(f"candidates: {c!r} is not allowed: give a name, a (name, "
                             "options) pair or a gradcomp compressor")
        if built[-1].name == "auto":
            raise ValueError("candidates: 'auto' cannot be its own candidate")
    return built


def settings_of(options: dict) -> dict[str, Any]:
    """What `register(ddp_model, "auto", **options)` runs with, as result tables record it:
    the candidates with their options, and every option of `auto` (defaults filled in)."""
    given = dict(options)
    members = build_candidates(given.pop("candidates", DEFAULT_CANDIDATES))
    defaults = {k: p.default for k, p in inspect.signature(AutoRoute).parameters.items()
                if k in AUTO_OPTIONS and k != "candidates"}
    return {"candidates": Candidates(members).options()["candidates"], **defaults, **given}


class Candidates:
    """The candidate methods, as the hook state checkpoints them and compares them across
    ranks (the method "auto": its options, shared random state and `state_dict`)."""

    name = "auto"

    def __init__(self, members: list[Compressor]):
        self.members = members

    @property
    def shared_randomness(self) -> bool:
        return any(m.shared_randomness for m in self.members)

    def options(self) -> dict[str, Any]:
        return {"candidates": [(m.name, m.options()) for m in self.members]}

    def set_rank(self, rank: int) -> None:
        for m in self.members:
            m.set_rank(rank)

    def shared_state(self) -> bytes:
        return b"".join(m.shared_state() for m in self.members)

    def state_dict(self) -> dict[str, Any]:
        return {"members": [m.state_dict() for m in self.members]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for m, s in zip(self.members, state["members"]):
            m.load_state_dict(s)


class AutoRoute(Route):
    """The route of `auto` (see the module docstring and `choice`).

    candidates: the methods to choose among (default `DEFAULT_CANDIDATES`).
    explore_iters: iterations each candidate carries every bucket while exploring (the first
        is a warm-up; a candidate that cannot win ends after it: `choice`).
    confirm_rounds: rounds in which the candidates priced within `confirm_margin` (relative,
        default 1.0: twice the best) of a bucket's best after that carry every bucket in turn,
        two iterations each (the second timed), before the decision (0: none; `choice`,
        "Confirmation"); also the timed turns each of the decisions in force and a
        re-pricing's proposal takes before a move (`trial`; 0: the table's word).
    confirm_max_rounds: the most rounds a contender takes: after every `confirm_rounds`, the
        contenders clearly slower than the fastest leave and the others go on, until one is
        left or they have had this many (`trial.still_close`; `confirm_rounds`: no more).
    check_every: iterations between drift checks (one small all-reduce each).
    redecide_every: iterations between explorations.
    drift: relative change of a measured cost that triggers a new decision.
    slowdown: a bucket that took over `slowdown` times its predicted time triggers a drift
        check when the ranks have agreed on it, at most `stream.SLOWDOWN_EVERY` + 1
        iterations later, the bandwidth refitted from that iteration on (None: only the
        periodic checks). After a decision the samples are reduced in one small all-reduce
        per `stream.SLOWDOWN_EVERY` iterations (launched at an iteration's first bucket and
        read an iteration later: `stream`); with None, once per `check_every` iterations,
        before each check (the same decisions).
    guard: the convergence guard (`guard`): None (off), True (`GUARD_DEFAULTS`), or a dict of
        threshold, every, max_ratio.
    start_iter: the hook state's (the first iteration that explores).
    """

    learns = True
    reports = ("chooser", "guard", "switches", "label", "choices", "choices_text",
               "exploration_order", "settled_by", "decision_text")

    def __init__(self, candidates=DEFAULT_CANDIDATES, *, explore_iters: int = 3,
                 confirm_rounds: int = 5, confirm_max_rounds: int = 20,
                 confirm_margin: float = 1.0, check_every: int = 10,
                 redecide_every: int = 1000, drift: float = 0.2, slowdown: float | None = 2.0,
                 guard=None, start_iter: int = 1):
        self.method = Candidates(build_candidates(candidates))
        check_int(explore_iters, "explore_iters", 2)
        check_int(confirm_rounds, "confirm_rounds", 0)
        if check_int(confirm_max_rounds, "confirm_max_rounds", 0) < confirm_rounds:
            raise ValueError(f"confirm_max_rounds={confirm_max_rounds!r} is not allowed: "
                             "confirm_max_rounds must be an integer >= confirm_rounds "
                             f"({confirm_rounds})")
        check_number(confirm_margin, "confirm_margin", 0)
        check_int(check_every, "check_every", 1)
        check_int(redecide_every, "redecide_every", 1)
        check_number(drift, "drift", 0, above=True)
        if slowdown is not None:
            slowdown = check_number(slowdown, "slowdown", 1, above=True)
        self._explore = dict(explore_iters=explore_iters, confirm_rounds=confirm_rounds,
                             confirm_max_rounds=confirm_max_rounds,
                             confirm_margin=float(confirm_margin), check_every=check_every,
                             redecide_every=redecide_every, drift=float(drift),
                             slowdown=slowdown)
        self._guard = guard_settings(guard)
        self.start_iter = start_iter
        self.guard = Guard(**self._guard, start=start_iter) if self._guard else None
        self.chooser: Chooser | None = None
        #: (iteration, bucket, candidate's `label`) each time a bucket changed candidate
        self.switches: list[tuple[int, int, str]] = []

    @property
    def warns(self) -> bool:
        return False  # an uncompressed bucket is auto's choice, not a silent no-op

    def options(self) -> dict[str, Any]:
        return {**self._explore, "guard": self._guard}

    def connect(self, ranks: Ranks, exchange_ranks: Ranks) -> None:
        self.ranks, self.exchange_ranks = ranks, exchange_ranks
        self.communicators = [build(m, exchange_ranks) for m in self.method.members]
        self._carrier: dict[int, int] = {}  # bucket -> candidate that last carried it
        self._given: dict[int, int] = {}  # bucket -> its candidate in the current iteration
        self._pending: list[tuple[BucketRecord, int]] = []
        self._ended = None  # (iteration, when its last bucket was decoded)
        self._stepped: int | None = None

    def _chooser(self) -> Chooser:
        if self.chooser is None:
            transfers = [Transfer("allreduce" if m.aggregation == "allreduce" else "allgather",
                                  2 if isinstance(m, TwoRoundCompressor) else 1)
                         for m in self.method.members]
            # priced on the ranks that exchange: hierarchical, the slow tier's (one per node)
            self.chooser = Chooser(transfers, self.exchange_ranks.world_size, self.start_iter,
                                   **self._explore, order=self.exploration_order())
        return self.chooser

    def exploration_order(self) -> list[int]:
        """The candidates, most compressing first (by what each sends of 2**20 float32
        elements), so that on a slow link the uncompressed ones come last, when a faster
        candidate has been measured and their warm-up can end their exploration."""
        members = self.method.members
        return sorted(range(len(members)), key=lambda c: members[c].wire_nbytes(2 ** 20))

    # -- the hook's questions ---------------------------------------------------------------
    def prepare(self, iteration: int, device) -> None:
        """At an iteration's first bucket: collect the finished samples and step the choice
        and the guard (collectives over every rank). Where the choice times the iteration
        (`Chooser.timing`) its mark is the end of the one before: when that one's last
        bucket was decoded, a moment the ranks share (they leave a collective together; their
        first buckets are ready when each one's backward gets there)."""
        if self._stepped == iteration:
            return
        self._stepped = iteration
        chooser = self._chooser()
        self._collect(iteration)
        ended = self._ended[1] if self._ended and self._ended[0] == iteration - 1 else None
        chooser.step(iteration, self._reduce(device), self._launch(device),
                     ended if chooser.timing(iteration) else None)
        if self.guard is not None:
            self.guard.step(iteration, self._reduce(device))

    def pick(self, bucket: Bucket, iteration: int) -> Communicator:
        """The communicator of the bucket's candidate: explored, decided, or narrowed by the
        guard; a switch hands the previous candidate's residual over."""
        self.prepare(iteration, bucket.buffer.device)
        chooser = self._chooser()
        candidate = chooser.choice(bucket.index, iteration)
        if self.guard is not None:
            self.guard.add(bucket.index, bucket.buffer)
            if (chooser.decided_at is not None and not chooser.exploring(iteration)
                    and self.guard.limits(bucket.index)):
                candidate = self.guard.choice(chooser, bucket.index)
        self._hand_over(bucket, candidate, iteration)
        self._given[bucket.index] = candidate
        return self.communicators[candidate]

    def _hand_over(self, bucket: Bucket, candidate: int, iteration: int) -> None:
        """Add what the bucket's previous candidate kept for it to the gradient now; note
        the switch."""
        before = self._carrier.get(bucket.index)
        self._carrier[bucket.index] = candidate
        if before == candidate:
            return
        self.switches.append((iteration, bucket.index, self.label(candidate)))
        if before is None:
            return
        residual = self.method.members[before].take_residual(bucket.index)
        if residual is not None and residual.numel() == bucket.buffer.numel():
            bucket.buffer.add_(residual.reshape(bucket.buffer.shape).to(bucket.buffer))

    def learn(self, record: BucketRecord) -> None:
        """Keep the record as a sample of the candidate the bucket was given (also when it
        travelled uncompressed: "none", or a method that would not shrink it)."""
        candidate = self._given.get(record.bucket)
        if candidate is not None and self._chooser().measured(record.iteration):
            self._pending.append((record, candidate))

    # -- reports ----------------------------------------------------------------------------
    def label(self, candidate: int) -> str:
        """A candidate's name in reports: its method's, "#position" added where two share
        it."""
        names = [m.name for m in self.method.members]
        name = names[candidate]
        return name if names.count(name) == 1 else f"{name}#{candidate}"

    def choices(self) -> dict[int, tuple[str, int]]:
        """bucket -> (the candidate that carried it last, by `label`; the iteration since
        which it has), from `switches`."""
        return {b: (c, i) for i, b, c in sorted(self.switches)}

    def choices_text(self) -> str:
        """`choices` in one line: "bucket 0: powersgd since 13; bucket 1: bf16 since 13",
        and " (exploring, no decision yet)" while an exploration runs (its candidate is no
        choice)."""
        text = "; ".join(f"bucket {b}: {name} since {i}"
                         for b, (name, i) in sorted(self.choices().items()))
        exploring = self.chooser is not None and self.chooser.decided_at is None
        return text + " (exploring, no decision yet)" if text and exploring else text

    @property
    def settled_by(self) -> int:
        """The iteration by which the first decision acts, at the latest: every candidate
        explored for `explore_iters` and confirmed for `confirm_max_rounds` turns of `TURN`
        iterations (none without rounds) from `start_iter` on, plus `DECISION_LAG`; from there
        on, the iterations are auto's steady state."""
        explore = self._explore
        rounds = explore["confirm_max_rounds"] if explore["confirm_rounds"] else 0
        per_candidate = explore["explore_iters"] + TURN * rounds
        return self.start_iter + len(self.method.members) * per_candidate + DECISION_LAG

    def decision_text(self) -> str:
        """What the last decision rested on, in one line: the iteration it was taken, each
        candidate's price (predicted codec and communication, summed over the buckets) and
        the median iteration of each contender's confirmation rounds, in ms, and the verdict
        of the last trial of a re-pricing's proposal (`trial`), with the median iteration of
        the decisions in force and of the proposal: "decided at 37; priced: none 290.1, bf16
        180.2, powersgd 150.3, topk 160.4; rounds: powersgd 201.3, topk 210.0; trial at 118:
        kept 190.2 against 205.3". Empty before the first decision."""
        chooser = self.chooser
        if chooser is None or chooser.decided_at is None:
            return ""
        buckets = sorted(chooser.decisions)
        priced = {self.label(c): sum(chooser.predict(b, c) for b in buckets)
                  for c in range(len(chooser.transfers))}
        rounds = {self.label(c): s for c, s in chooser.rounds.items()}
        text = f"decided at {chooser.decided_at}; priced: {_in_ms(priced)}"
        text += f"; rounds: {_in_ms(rounds)}" if rounds else ""
        if chooser.last_trial is not None:
            end, now, proposed, taken = chooser.last_trial
            won, lost = (proposed, now) if taken else (now, proposed)  # the winner's first
            text += (f"; trial at {end}: {'taken' if taken else 'kept'} {won * 1e3:.1f} "
                     f"against {lost * 1e3:.1f}")
        return text

    # -- measurements -----------------------------------------------------------------------
    def _collect(self, iteration: int) -> None:
        """Samples from the completed iterations before `iteration` (idle link: the bucket's
        collective started after the previous bucket's had finished). Codec work inside the
        exchange (PowerSGD's between rounds) counts as codec time, not communication."""
        done = [p for p in self._pending if p[0].iteration < iteration]
        self._pending = [p for p in self._pending if p[0].iteration >= iteration]
        if done:  # in the order they finished
            self._ended = (done[-1][0].iteration, done[-1][0].decoded)
        done.sort(key=lambda p: (p[0].iteration, p[0].bucket))
        previous = None
        for record, candidate in done:
            idle = (previous is None or previous.iteration != record.iteration
                    or seconds_between(previous.exchanged, record.encoded) >= 0)
            between = record.between_s
            codec = (seconds_between(record.started, record.encoded)
                     + seconds_between(record.exchanged, record.decoded) + between)
            comm = max(seconds_between(record.encoded, record.exchanged) - between, 0.0)
            self.chooser.samples.append(Sample(
                record.iteration, record.bucket, candidate, codec, comm, record.bytes_sent,
                idle, self.chooser.warmup(record.iteration)))
            previous = record

    def _reduce(self, device):
        """The element-wise maximum over ranks."""
        def reduce(values: torch.Tensor) -> torch.Tensor:
            if self.ranks.world_size == 1:
                return values
            moved = values.to(device)
            dist.all_reduce(moved, op=dist.ReduceOp.MAX, group=self.ranks.group)
            return moved.cpu()
        return reduce

    def _launch(self, device):
        """`_reduce`, started without waiting."""
        def launch(values: torch.Tensor):
            if self.ranks.world_size == 1:
                return lambda: values
            moved = values.to(device)
            work = dist.all_reduce(moved, op=dist.ReduceOp.MAX, group=self.ranks.group,
                                   async_op=True)

            def wait() -> torch.Tensor:
                work.wait()
                return moved.cpu()
            return wait
        return launch

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"auto": self._chooser().state_dict(), "carrier": dict(self._carrier),
                "switches": list(self.switches),
                **({"guard": self.guard.state_dict()} if self.guard is not None else {})}

    def check_checkpoint(self, state: dict[str, Any]) -> None:
        if "auto" in state and (self.guard is None) != ("guard" not in state):
            raise ValueError("this checkpoint was saved with guard="
                             f"{'on' if 'guard' in state else 'None'}; this hook runs guard="
                             f"{self._guard}: build the hook with the same guard before loading")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.start_iter = state["start_iter"]
        self._chooser().load_state_dict(state["auto"])
        self._carrier = dict(state["carrier"])
        self.switches = [(i, b, self.label(c) if isinstance(c, int) else c)  # ints: older
                         for i, b, c in state.get("switches", [])]
        if self.guard is not None:
            self.guard.load_state_dict(state["guard"])

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items()
                if k not in ("ranks", "exchange_ranks", "communicators", "_carrier", "_given",
                             "_pending", "_stepped", "_ended")}


def _in_ms(seconds: dict[str, float]) -> str:
    return ", ".join(f"{name} {s * 1e3:.1f}" for name, s in seconds.items())


def AutoState(candidates=DEFAULT_CANDIDATES, **options) -> HookState:  # noqa: N802 - the API's
    """The hook state of `auto`: a `HookState` holding an `AutoRoute`; `options` of
    `AUTO_OPTIONS` go to the route, the others to `HookState` (no communicator option: each
    candidate travels its way)."""
    auto = {k: options.pop(k) for k in AUTO_OPTIONS if k in options}
    route = AutoRoute(candidates, **auto, start_iter=options.get("start_iter", 1))
    return HookState(route, **options)
