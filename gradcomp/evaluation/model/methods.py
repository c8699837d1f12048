"""What a compression method costs in the performance model: bytes on the wire per round,
how the payloads aggregate, and its encode / decode time.

Aggregations: ``allreduce`` (one ring all-reduce of the payload), ``allgather`` (one
all-gather; decode once per received payload, i.e. p times), ``powersgd`` (two sequential
all-reduces: the uncompressed pieces with P, then Q) and ``blocksparse`` (the decoded, mostly
zero gradient through the block-sparse all-reduce; `BlockSparsity` says how many blocks are
non-zero; method names ``topk+blocksparse``, ``threshold+blocksparse``,
``randomk+blocksparse``). Encode and decode cost ``a + b*n``
seconds for n elements per application, counted as the hook applies the method
(`MethodCost.applications`): once per bucket, or once per parameter when `per_parameter`;
PowerSGD once per batched shape group of the bucket (the hook multiplies all matrices of one
shape in one batched call: `PowerSGD.layout`), its b over the compressed matrices' elements,
and the 1-D and too-small tensors it sends uncompressed cost only their copy into and out of
the packed buffer (`plain`: 4 bytes read and written each way at `MEMORY_BPS`, stated).

Default costs (`assumed_costs`, used for methods given by name without a measured table) are
memory-bound floors, stated rather than measured: each application costs 20 us of launches,
plus the bytes it moves at 800 GB/s (V100-like): encode reads the 4-byte gradient
`passes[0]` times and writes the wire bytes; decode reads the wire bytes and writes the
4-byte result `passes[1]` times (per payload). Passes (`PASSES`): casts 1/1; top-k 3/1
(magnitudes and a radix select); threshold 2/1; random-k 3/1 (random permutation); PowerSGD
4/3 (error feedback, M Q, M^T P; P Q^T and the residual); sign and quantisers 2/1; error
feedback adds 3 encode passes. `none` costs nothing. Real top-k and random-k kernels are
slower than these floors: measure them (`gradcomp` compress bench) and pass the table.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Callable, Sequence

import torch

from ... import diloco
from ...collectives import blocksparse
from ...comm import BLOCK_SPARSE_METHODS
from ...compressors import compressor
from ..profiles.architectures import Shape
from .blocksparse import union_density

AGGREGATIONS = ("allreduce", "allgather", "powersgd", "blocksparse")
BLOCK_SPARSE_SUFFIX = "+blocksparse"
DTYPES = {2: torch.float16, 4: torch.float32, 8: torch.float64}
LAUNCH_S = 20e-6
MEMORY_BPS = 800e9
PASSES = {"fp16": (1, 1), "bf16": (1, 1), "topk": (3, 1), "threshold": (2, 1),
          "randomk": (3, 1), "powersgd": (4, 3)}
DEFAULT_PASSES = (2, 1)
EF_PASSES = 3
PLAIN_COPY_S = 8 / MEMORY_BPS  # s per uncompressed float32 element: read and write it once


class PerBucket(tuple):
    """Fitted (encode, decode[, middle]) costs of a whole bucket as the hook computes it
    (`fit.hook_costs`: the hook-path bench), so never multiplied by a method's applications
    per bucket (PowerSGD's matrices)."""


class Measured(tuple):
    """A phase's cost measured at `sizes` (elements; `seconds` each), priced where it was
    measured: between two measured sizes on the straight line through them, beyond the
    smallest or largest along the nearest segment (never falling with size, never below 0).
    As a tuple it is the (a, b) line fitted to the same points, for what reads a line.
    Why: the hook-path bench measures the workload's own bucket sizes, and codec costs bend
    upward once a bucket leaves the caches, so one line through 4K-4M elements under-prices
    the largest bucket (int8's encode by 7-12%, its decode by 15-20% on the testbed)."""

    def __new__(cls, line, sizes, seconds):
        self = super().__new__(cls, (float(line[0]), float(line[1])))
        order = sorted(range(len(sizes)), key=lambda i: sizes[i])
        self.sizes = tuple(float(sizes[i]) for i in order)
        self.seconds = tuple(float(seconds[i]) for i in order)
        if len(set(self.sizes)) != len(self.sizes) or len(self.sizes) < 2:
            raise ValueError(f"sizes={sizes!r}: give at least 2 distinct sizes")
        return self

    def __getnewargs__(self):  # pickle and copy rebuild it whole
        return tuple(self), self.sizes, self.seconds

    def __call__(self, numel: float) -> float:
        n, t = self.sizes, self.seconds
        i = min(max(bisect.bisect_right(n, numel), 1), len(n) - 1)  # segment n[i-1]..n[i]
        slope = (t[i] - t[i - 1]) / (n[i] - n[i - 1])
        if not n[0] <= numel <= n[-1]:
            slope = max(slope, 0.0)
        return max(0.0, t[i - 1] + slope * (numel - n[i - 1]))


@dataclass(frozen=True)
class BlockSparsity:
    """How a gradient falls into the blocks of the block-sparse all-reduce.

    ratio: fraction of elements each worker keeps, at independent uniform positions, so a
        block of b elements is non-zero with probability ``1 - (1 - ratio)^b`` (top-k's
        elements scatter: at ratio 0.01 and b = 256, 92% of blocks are non-zero);
    density: a measured fraction of non-zero blocks per worker instead;
    union_density: a measured fraction of blocks non-zero on some worker; else
        ``1 - (1 - density)^p`` for independent workers, or `density` when all workers keep
        the same positions (`shared_positions`: random-k's shared seed).
    """

    block_size: int = blocksparse.DEFAULT_BLOCK_SIZE
    ratio: float = 1.0
    density: float | None = None
    union_density: float | None = None
    shared_positions: bool = False

    def __post_init__(self):
        if isinstance(self.block_size, bool) or not isinstance(self.block_size, int) \
                or self.block_size < 1:
            raise ValueError(f"block_size={self.block_size!r} is not allowed: it must be an "
                             "integer >= 1")
        for option in ("ratio", "density", "union_density"):
            value = getattr(self, option)
            if value is not None and not (isinstance(value, (int, float))
                                          and 0 <= value <= 1):
                raise ValueError(f"{option}={value!r} is not allowed: it must be a fraction "
                                 "in [0, 1]")

    def worker_density(self) -> float:
        if self.density is not None:
            return float(self.density)
        return 1.0 - (1.0 - self.ratio) ** self.block_size

    def union(self, workers: int) -> float:
        if self.union_density is not None:
            return float(self.union_density)
        d = self.worker_density()
        return d if self.shared_positions else union_density(d, workers)


@dataclass(frozen=True)
class MethodCost:
    """A method as the model sees it. `wire(shapes, dtype_bytes)` gives the bytes one worker
    sends per round for one bucket holding tensors of `shapes` (one round, or two for
    ``powersgd``); `encode` / `decode` are (a, b): a + b*n seconds per application (a
    fitted negative total counts as 0), or a `Measured` cost. `middle`: ``powersgd``'s work between its rounds
    (orthogonalise P, Q = M^T P), (a, b) like encode; None: half the encode is priced there
    (`encode` then holds both). `batches`: how the hook applies the method to one bucket,
    shapes -> (applications, elements compressed, elements sent plain) (None: once per
    bucket, or per tensor when `per_parameter`, over all elements); `plain`: (encode,
    decode) seconds per plain element."""

    name: str
    aggregation: str
    wire: Callable[[Sequence[Shape], int], tuple[float, ...]]
    encode: tuple[float, float] = (0.0, 0.0)
    decode: tuple[float, float] = (0.0, 0.0)
    per_parameter: bool = False
    blocks: BlockSparsity | None = None
    middle: tuple[float, float] | None = None
    batches: Callable[[Sequence[Shape]], tuple[int, int, int]] | None = None
    plain: tuple[float, float] = (0.0, 0.0)
    priced_by: str = ""  # the cost-table key whose costs these are ("": not from a table)
    #: A DiLoCo variant (`gradcomp.diloco.Variant`): this method carries its outer gradients,
    #: once per H inner steps (`timeline.predict` prices it so); None: every step.
    diloco: Any = None

    def __post_init__(self):
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation={self.aggregation!r} is not allowed: choose one of "
                             f"{', '.join(map(repr, AGGREGATIONS))}")
        if (self.aggregation == "blocksparse") != (self.blocks is not None):
            raise ValueError("blocks: give a BlockSparsity exactly when aggregation is "
                             "'blocksparse'")
        for option in ("encode", "decode", "middle"):
            if getattr(self, option) is None:
                continue
            a, b = getattr(self, option)
            if not (math.isfinite(a) and math.isfinite(b)):
                raise ValueError(f"{option}={getattr(self, option)!r}: (a, b) must be finite")
            if not isinstance(getattr(self, option), Measured):
                object.__setattr__(self, option, (float(a), float(b)))

    @property
    def costs_note(self) -> str:
        """"" when the costs are the method's own; else whose they are (a variant priced
        with its method's default options, the table having no row for it)."""
        if not self.priced_by or self.priced_by == self.name:
            return ""
        return (f"codec costs of {self.priced_by} with its default options: the table has no "
                f"row for {self.name}")

    def applications(self, shapes: Sequence[Shape]) -> tuple[int, int, int]:
        """(codec applications, elements compressed, elements sent plain) for one bucket
        holding tensors of `shapes`, as the hook computes it."""
        if self.batches is not None:
            return self.batches(shapes)
        return (len(shapes) if self.per_parameter else 1,
                sum(math.prod(s) for s in shapes), 0)

    def _time(self, ab: tuple[float, float], shapes: Sequence[Shape], plain: float = 0.0
              ) -> float:
        calls, compressed, kept = self.applications(shapes)
        if isinstance(ab, Measured):  # each application of the mean size, where measured
            return calls * ab(compressed / calls) + plain * kept if calls else plain * kept
        return max(0.0, ab[0] * calls + ab[1] * compressed) + plain * kept

    def encode_s(self, shapes: Sequence[Shape]) -> float:
        """Encode time of one bucket."""
        return self._time(self.encode, shapes, self.plain[0])

    def decode_s(self, shapes: Sequence[Shape]) -> float:
        """Decode time of one bucket's payload (one payload: all-gather decodes p of them)."""
        return self._time(self.decode, shapes, self.plain[1])

    def middle_s(self, shapes: Sequence[Shape]) -> float:
        """``powersgd``'s work between its rounds for one bucket (0 when `middle` is None)."""
        return 0.0 if self.middle is None else self._time(self.middle, shapes)

    def with_costs(self, encode=None, decode=None, middle=None) -> "MethodCost":
        """The same method with other (a, b) encode / decode (and middle) costs."""
        def cost(new, old):
            return old if new is None else new if isinstance(new, Measured) else tuple(new)

        return replace(self, encode=cost(encode, self.encode),
                       decode=cost(decode, self.decode), middle=cost(middle, self.middle))

    @classmethod
    def fixed_ratio(cls, ratio: float, aggregation: str = "allreduce", encode=(0.0, 0.0),
                    decode=(0.0, 0.0), name: str | None = None) -> "MethodCost":
        """A synthetic method sending 1/`ratio` of the gradient's bytes (ratio >= 1)."""
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio >= 1:
            raise ValueError(f"ratio={ratio!r} is not allowed: a compression ratio is a "
                             "number >= 1")
        if aggregation == "powersgd":
            raise ValueError("aggregation='powersgd' is not allowed for fixed_ratio: choose "
                             "'allreduce' or 'allgather'")

        def wire(shapes, dtype_bytes):
            return (sum(math.prod(s) for s in shapes) * dtype_bytes / ratio,)

        return cls(name or f"ratio {ratio:g}x", aggregation, wire, encode, decode)

    @classmethod
    def from_compressor(cls, method, *, encode=(0.0, 0.0), decode=(0.0, 0.0),
                        per_parameter: bool | None = None, name: str | None = None,
                        **options) -> "MethodCost":
        """From a gradcomp compressor (a name and its options, or a built compressor); wire
        bytes come from its `wire_nbytes`, applied to the whole bucket unless
        `per_parameter`; PowerSGD works per matrix, batched by shape (its layout gives P and
        Q, and the applications)."""
        comp = compressor(method, **options) if isinstance(method, str) else method
        label = name or variant_label(comp.name, options)
        if comp.name == "powersgd":
            return cls(label, "powersgd", _powersgd_wire(comp), encode, decode,
                       batches=_powersgd_batches(comp), plain=(PLAIN_COPY_S, PLAIN_COPY_S))

        @lru_cache(maxsize=4096)
        def nbytes(numel: int, dtype_bytes: int) -> float:
            return float(comp.wire_nbytes(numel, DTYPES[dtype_bytes]))

        split = bool(per_parameter)

        def wire(shapes, dtype_bytes):
            sizes = [math.prod(s) for s in shapes]
            if not split:
                sizes = [sum(sizes)]
            return (sum(nbytes(n, dtype_bytes) for n in sizes),)

        return cls(label, comp.aggregation, wire, encode, decode, split)


    @classmethod
    def block_sparse(cls, blocks: BlockSparsity, encode=(0.0, 0.0), decode=(0.0, 0.0),
                     name: str = "blocksparse") -> "MethodCost":
        """The block-sparse all-reduce of the gradient as it is (e.g. with measured block
        densities), or of a sparsifier's decoded output (`resolve("topk+blocksparse")`).
        `wire` gives the bytes of one worker's non-zero blocks (d S); the timeline prices the
        traffic itself (`Network.block_sparse_cost`: bitmaps, the (p-1)/p of them that go
        to other owners, and the union's shard)."""
        def wire(shapes, dtype_bytes):
            return (sum(math.prod(s) for s in shapes) * dtype_bytes * blocks.worker_density(),)

        return cls(name, "blocksparse", wire, encode, decode, blocks=blocks)


def variant_label(name: str, options: dict) -> str:
    """How a method with options is named: ``name(key=value, ...)`` (a cost table's row of
    that variant has this name)."""
    return f"{name}({', '.join(f'{k}={v}' for k, v in options.items())})" if options else name


def parse_methods(text: str, option: str = "methods") -> list[tuple[str, dict]]:
    """(name, options) of each method in `text`: ``name[:key=value[,key=value...]]``,
    several separated by commas (``topk:ratio=0.001,powersgd:rank=16,bf16``); an item with
    a ``:`` or without ``=`` starts a method, a ``key=value`` item is an option of the
    method before it. Values read as integers, numbers, true / false, else text; the
    method checks them when it is built (`resolve`). Bad syntax: a ValueError naming
    `option`."""
    methods: list[tuple[str, dict]] = []
    for item in str(text).split(","):
        name, colon, rest = item.strip().partition(":")
        if colon or "=" not in name:
            if not name.strip():
                raise ValueError(f"{option}={text!r} is not allowed: a method name is empty; "
                                 "give name[:key=value,...], e.g. powersgd:rank=4,topk")
            methods.append((name.strip(), {}))
            if not colon:
                continue
        elif not methods:
            raise ValueError(f"{option}={text!r} is not allowed: option {name!r} comes before "
                             "any method name; give name:key=value, e.g. powersgd:rank=4")
        else:
            rest = name
        key, equals, value = rest.partition("=")
        if not (equals and key.strip()):
            raise ValueError(f"{option}={text!r} is not allowed: {rest!r} is not key=value; "
                             "give name:key=value, e.g. powersgd:rank=4")
        methods[-1][1][key.strip()] = _option_value(value.strip())
    return methods


def method_spec(name: str, options: dict) -> str:
    """The ``name:key=value,...`` text of a method with options (`parse_methods` reads it
    back)."""
    text = ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in options.items())
    return f"{name}:{text}" if options else name


def _option_value(text: str):
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _powersgd_wire(comp):
    @lru_cache(maxsize=1024)
    def wire(shapes, dtype_bytes):
        lay = comp.layout([torch.Size(s) for s in shapes])
        low = 8 if dtype_bytes == 8 else 4  # P and Q travel in float32 (float64)
        return (lay.plain_numel * dtype_bytes + lay.low_rank_numel(0) * low,
                lay.low_rank_numel(1) * low)

    return lambda shapes, dtype_bytes: wire(tuple(map(tuple, shapes)), dtype_bytes)


def _powersgd_batches(comp):
    """Applications per bucket as `PowerSGD.begin` / `next_round` / `finish` compute them:
    one per shape group (a batched matmul and orthogonalisation each), b over the grouped
    matrices; the plain pieces are only copied."""
    @lru_cache(maxsize=1024)
    def batches(shapes):
        lay = comp.layout([torch.Size(s) for s in shapes])
        total = sum(math.prod(s) for s in shapes)
        return len(lay.groups), total - lay.plain_numel, lay.plain_numel

    return lambda shapes: batches(tuple(map(tuple, shapes)))


def assumed_costs(method: MethodCost, error_feedback: bool = False,
                  memory_bps: float = MEMORY_BPS, launch_s: float = LAUNCH_S) -> MethodCost:
    """`method` with the stated memory-bound default costs (module docstring), keyed by the
    method's base name; `none` stays free."""
    base = method.name.split("(")[0]
    if base == "none":
        return method.with_costs((0.0, 0.0), (0.0, 0.0))
    enc_passes, dec_passes = PASSES.get(base, DEFAULT_PASSES)
    enc_passes += EF_PASSES if error_feedback else 0
    n = 1 << 20
    wire_per_elem = sum(method.wire([(1024, 1024)], 4)) / n
    priced = method.with_costs((launch_s, (4 * enc_passes + wire_per_elem) / memory_bps),
                               (launch_s, (wire_per_elem + 4 * dec_passes) / memory_bps))
    return replace(priced, plain=(8 / memory_bps,) * 2) if method.batches else priced


def resolve(method, costs: dict | None = None, /, **options) -> MethodCost:
    """A MethodCost from a MethodCost (as is), a number (`fixed_ratio`), or a gradcomp method
    name with its `options` (or one ``name:key=value,...`` of `parse_methods`); names get
    their fitted costs from `costs` ({name: (encode, decode)} or (encode, decode, middle),
    see `fit.codec_costs` and `fit.hook_costs`; a `PerBucket` entry prices a bucket once):
    a variant's own row (keyed ``name(key=value, ...)``) when there, else its method's
    (`MethodCost.costs_note` says so), else `assumed_costs`. An option the method does not
    take is a ValueError naming it. `method` and `costs` are positional, so that a DiLoCo
    variant's options may hold its own `method`."""
    if isinstance(method, MethodCost):
        return method
    if isinstance(method, (int, float)) and not isinstance(method, bool):
        return MethodCost.fixed_ratio(method)
    if not isinstance(method, str):
        raise TypeError(f"method={method!r}: give a gradcomp method name, a compression ratio "
                        "or a MethodCost")
    if ":" in method:
        specs = parse_methods(method, "method")
        if len(specs) > 1:
            raise ValueError(f"method={method!r} is not allowed: it names "
                             f"{len(specs)} methods; give one (several: --methods)")
        method, options = specs[0][0], {**specs[0][1], **options}
    if method == diloco.NAME:
        return _diloco_method(options, costs)
    try:
        if method.endswith(BLOCK_SPARSE_SUFFIX):
            return _block_sparse_method(method, costs, **options)
        comp = compressor(method, **options)
    except TypeError as exc:  # an option the method does not take
        raise ValueError(f"method={variant_label(method, options)!r}: {exc}") from None
    label = variant_label(method, options)
    built = MethodCost.from_compressor(comp, name=label)
    key = label if costs and label in costs else method
    if costs and key in costs:
        priced = replace(built.with_costs(*costs[key]), priced_by=key)
        return replace(priced, per_parameter=False, batches=None, plain=(0.0, 0.0)) \
            if isinstance(costs[key], PerBucket) else priced
    return assumed_costs(built, error_feedback=hasattr(comp, "inner"))


def _block_sparse_method(method: str, costs: dict | None,
                         block_size: int = blocksparse.DEFAULT_BLOCK_SIZE,
                         **options) -> MethodCost:
    """``<sparsifier>+blocksparse``: the sparsifier's encode plus decoding its own payload to a
    dense buffer, then the block-sparse all-reduce; decode writes the result back (the
    sparsifier's decode cost)."""
    base = method[: -len(BLOCK_SPARSE_SUFFIX)]
    if base not in BLOCK_SPARSE_METHODS:
        allowed = ", ".join(m + BLOCK_SPARSE_SUFFIX for m in BLOCK_SPARSE_METHODS)
        raise ValueError(f"method={method!r} is not allowed: the block-sparse communicator "
                         f"takes {allowed}")
    inner = resolve(base, costs, **options)
    comp = compressor(base, **options)
    inner_comp = getattr(comp, "inner", comp)
    blocks = BlockSparsity(block_size, inner_comp.ratio,
                           shared_positions=inner_comp.shared_randomness)
    encode = (inner.encode[0] + inner.decode[0], inner.encode[1] + inner.decode[1])
    return MethodCost.block_sparse(blocks, encode, inner.decode,
                                   name=variant_label(method, options))


def _diloco_method(options: dict, costs: dict | None) -> MethodCost:
    """A DiLoCo variant (``diloco:H=50,method=int8``, `gradcomp.diloco.Variant`): its outer
    method, resolved as a per-step one, carrying the variant."""
    options = dict(options)
    ef = options.pop("error_feedback", None)
    variant = diloco.Variant.from_options(options, ef)
    outer = resolve(variant.method, costs, **({} if ef is None else {"error_feedback": ef}),
                    **variant.method_options)
    own = outer.priced_by and not outer.costs_note  # priced by its own row: so is the variant
    return replace(outer, name=variant.label(), diloco=variant,
                   priced_by=variant.label() if own else outer.priced_by)
