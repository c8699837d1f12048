"""Forest packing for all-reduce on a network of heterogeneous links (the topology-adaptive
synchronisation of Zhang, Wu & Li, INFOCOM 2021), as pure computation: no torch.distributed.

Model. `bandwidth[i][j]` is the capacity of the directed link from worker i to worker j (any
unit, e.g. bytes/s; 0: no link). A forest is a set of spanning trees T with rates x_T; tree T
carries a share x_T / sum(x) of the gradient: reduce up (child -> parent) and broadcast down
(parent -> child), both at rate x_T, pipelined in chunks. So a tree edge {u, v} uses both
links u->v and v->u at x_T, whatever the root; only pairs linked both ways can be tree edges,
with capacity c_uv = min(B[u][v], B[v][u]); all trees share a link's capacity. Optionally
every worker v has a NIC (`egress[v]`, `ingress[v]`; inf: none, the links alone limit it): in
tree T worker v sends deg_T(v) x_T (one partition to each tree neighbour) and receives as
much, so sum_T deg_T(v) x_T <= n_v = min(egress[v], ingress[v]).

Packing (`pack_forest`): the linear program max sum_T x_T subject to sum_{T ∋ e} x_T <= c_e
for every edge e, solved by column generation: the restricted LP over the trees found so far
(scipy's HiGHS) gives edge prices y >= 0 and node prices z >= 0; a tree's reduced cost is
1 - sum_{e in T} y_e - sum_v deg_T(v) z_v = 1 - sum_{uv in T} (y_uv + z_u + z_v), so the
pricing problem is still a minimum spanning tree (Kruskal), under edge weights
w_uv = y_uv + z_u + z_v, smoothed towards the best dual so far (Wentges' stabilisation). For
any (y, z), (y, z) / w(T_min) is a feasible dual of the full LP, so
``(sum_e c_e y_e + sum_v n_v z_v) / w(T_min)`` bounds the optimum from above (`dual_bound`);
the iteration stops when the packing is within `tol` of it, or when no tree improves it.

The cut bound (`partition_bound`): for a partition P of the workers into k >= 2 parts, every
spanning tree has at least k - 1 edges between parts (contract the parts: the tree stays
connected), each carrying the tree's rate, so (k - 1) sum_T x_T <= sum of c_e over edges
between parts, and the rate of any forest is at most ``min_P c(between parts of P) / (k - 1)``.
For k = 2 this is the ordinary cut bound: every partition of the gradient must cross every cut
in both directions. By Nash-Williams and Tutte's theorem the minimum over all partitions equals
the best fractional packing, so this bound is tight; it is computed by enumerating partitions
(up to `PARTITION_LIMIT` workers), independently of the LP. It ignores NICs: where they bind
it is not tight, and `pack_forest` reports the LP's dual bound instead.

`two_way_cut` is the bound for any all-reduce algorithm, trees or not: the workers outside a
set S need the sum of the inputs inside it, so the gradient crosses every cut both ways, and no
algorithm exceeds ``min_S min(B(S -> rest), B(rest -> S))`` (with NICs, B(S -> rest) is also
at most the egress of S and the ingress of the rest). Trees may fall short of it (on a
full mesh of equal links by up to 2x, where every worker must send about twice its gradient).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..checks import check_int

SMOOTHING = 0.7  # weight of the best dual so far when pricing
PARTITION_LIMIT = 10  # partition_bound enumerates Bell(n) partitions: 115,975 at n = 10
CUT_LIMIT = 20


def check_bandwidth(bandwidth, option: str = "bandwidth") -> np.ndarray:
    """`bandwidth` as a float matrix, checked: square, finite, >= 0 (the diagonal is ignored)."""
    try:
        matrix = np.array(bandwidth, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{option} is not allowed: give a square matrix of link "
                         "capacities (numbers >= 0; 0: no link)") from None
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 1:
        raise ValueError(f"{option} of shape {matrix.shape} is not allowed: it must be a "
                         "square n x n matrix of link capacities, n >= 1")
    if not np.isfinite(matrix).all() or (matrix < 0).any():
        raise ValueError(f"{option} is not allowed: link capacities must be finite numbers "
                         ">= 0 (0: no link)")
    matrix = matrix.copy()
    np.fill_diagonal(matrix, 0.0)
    return matrix


def check_nics(values, n: int, option: str = "nic") -> np.ndarray:
    """Per-worker NIC capacities as a length-`n` float array: None (no NICs: inf), one number
    for every worker, or n numbers, each > 0 (inf: unlimited)."""
    if values is None:
        return np.full(n, math.inf)
    try:
        caps = np.broadcast_to(np.array(values, dtype=float), (n,)).copy()
    except (TypeError, ValueError):
        raise ValueError(f"{option}={values!r} is not allowed: give one capacity or {n} "
                         "(numbers > 0, inf: unlimited)") from None
    if np.isnan(caps).any() or (caps <= 0).any():
        raise ValueError(f"{option}={values!r} is not allowed: NIC capacities must be > 0")
    return caps


def edge_capacities(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tree edges u < v (linked both ways) and their capacities min(B[u][v], B[v][u])."""
    u, v = np.triu_indices(len(matrix), 1)
    cap = np.minimum(matrix[u, v], matrix[v, u])
    keep = cap > 0
    return u[keep], v[keep], cap[keep]


def check_connected(matrix: np.ndarray, option: str = "bandwidth") -> None:
    """ValueError naming `option` unless links present both ways join all workers."""
    u, v, _ = edge_capacities(matrix)
    _check_connected(len(matrix), u, v, option)


def _check_connected(n: int, u, v, option: str) -> None:
    comp = _components(n, u, v)
    if len(set(comp)) > 1:
        groups = {}
        for node, c in enumerate(comp):
            groups.setdefault(c, []).append(node)
        raise ValueError(f"{option} is not allowed: the workers are not connected by links "
                         f"in both directions (groups {sorted(groups.values())}); every pair "
                         "of groups needs a path")


def _find(root: list[int], a: int) -> int:
    """Union-find: the representative of `a` (with path halving)."""
    while root[a] != a:
        root[a] = root[root[a]]
        a = root[a]
    return a


def _components(n, u, v) -> list[int]:
    root = list(range(n))
    for a, b in zip(u, v):
        root[_find(root, a)] = _find(root, b)
    return [_find(root, a) for a in range(n)]


def _spanning_tree(n: int, u, v, order) -> np.ndarray:
    """Kruskal: indices of the edges of a spanning tree taking edges in `order`."""
    root = list(range(n))
    chosen = []
    for e in order:
        a, b = _find(root, u[e]), _find(root, v[e])
        if a != b:
            root[a] = b
            chosen.append(e)
            if len(chosen) == n - 1:
                break
    return np.array(chosen, dtype=int)


@dataclass(frozen=True)
class Step:
    """One step of a forest all-reduce: `phase` ("reduce" or "broadcast") of elements
    [start, stop) along tree `tree`."""

    tree: int
    phase: str
    start: int
    stop: int


@dataclass(frozen=True, eq=False)
class Forest:
    """Spanning trees as parent arrays (-1 at the root) with their rates (the capacity unit),
    and the bounds the packing is measured against: `bound`, the partition cut bound (up to
    `PARTITION_LIMIT` workers, without NICs), else the LP's dual bound `dual_bound`."""

    parents: tuple
    rates: tuple
    bound: float
    dual_bound: float

    @property
    def workers(self) -> int:
        return len(self.parents[0])

    @property
    def rate(self) -> float:
        """Total rate: gradient units per second the forest all-reduces."""
        return float(sum(self.rates))

    @property
    def roots(self) -> list[int]:
        return [tree.index(-1) for tree in self.parents]

    @cached_property
    def children(self) -> tuple:
        """Per tree, per worker: its children."""
        out = []
        for tree in self.parents:
            kids = [[] for _ in tree]
            for node, parent in enumerate(tree):
                if parent >= 0:
                    kids[parent].append(node)
            out.append(tuple(tuple(k) for k in kids))
        return tuple(out)

    def depths(self) -> list[int]:
        """Per tree: the hops from the root to its deepest worker."""
        out = []
        for tree in self.parents:
            depth = 0
            for node in range(len(tree)):
                hops = 0
                while tree[node] >= 0:
                    node, hops = tree[node], hops + 1
                depth = max(depth, hops)
            out.append(depth)
        return out

    def link_load(self) -> np.ndarray:
        """n x n: the rate each directed link carries (reduce and broadcast together)."""
        load = np.zeros((self.workers, self.workers))
        for tree, rate in zip(self.parents, self.rates):
            for node, parent in enumerate(tree):
                if parent >= 0:
                    load[node, parent] += rate
                    load[parent, node] += rate
        return load

    def split(self, numel: int) -> list[tuple[int, int]]:
        """(start, stop) of each tree's partition of `numel` elements, sizes proportional to
        the rates (largest remainder; some may be empty)."""
        return split(numel, self.rates)

    def schedule(self, numel: int, chunks: int = 1) -> list[Step]:
        """The steps of an all-reduce of `numel` elements, in the order every worker runs
        them. Each tree's partition is cut into `chunks` near-equal chunks (so a chunk takes
        the same time on every tree); in round r, for every tree, reduce chunk r and
        broadcast chunk r - 1 (so reduce and broadcast overlap, and so do the trees). Empty
        chunks (partitions smaller than `chunks`) have no steps."""
        if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
            raise ValueError(f"chunks={chunks!r} is not allowed: it must be an integer >= 1")
        pieces = []
        for start, stop in self.split(numel):
            cuts = split(stop - start, np.ones(chunks))
            pieces.append([(start + a, start + b) for a, b in cuts if b > a])
        steps = []
        for r in range(chunks + 1):
            for t, parts in enumerate(pieces):
                if r < len(parts):
                    steps.append(Step(t, "reduce", *parts[r]))
                if 0 <= r - 1 < len(parts):
                    steps.append(Step(t, "broadcast", *parts[r - 1]))
        return steps


def split(numel: int, rates) -> list[tuple[int, int]]:
    """(start, stop) of consecutive parts of `numel` elements in proportion to `rates`."""
    if isinstance(numel, bool) or not isinstance(numel, (int, np.integer)) or numel < 0:
        raise ValueError(f"numel={numel!r} is not allowed: it must be an integer >= 0")
    rates = np.asarray(rates, dtype=float)
    if len(rates) == 1 and rates[0] > 0:  # also one worker's forest, of rate inf
        return [(0, int(numel))]
    if not len(rates) or not np.isfinite(rates).all() or (rates < 0).any() or rates.sum() <= 0:
        raise ValueError(f"rates={rates!r} is not allowed: give finite rates >= 0, not all 0")
    exact = numel * rates / rates.sum()
    sizes = np.floor(exact).astype(int)
    short = int(numel - sizes.sum())
    for i in sorted(range(len(rates)), key=lambda i: (-(exact[i] - sizes[i]), i))[:short]:
        sizes[i] += 1
    ends = np.cumsum(sizes)
    return [(int(e - s), int(e)) for s, e in zip(sizes, ends)]


def partitions(n: int) -> np.ndarray:
    """Every partition of range(n) as a row of part labels (restricted growth strings)."""
    rows = np.zeros((1, 1), dtype=np.int8)
    for _ in range(1, n):
        top = rows.max(axis=1) + 1
        reps = top + 1
        base = np.repeat(rows, reps, axis=0)
        label = np.concatenate([np.arange(r) for r in reps]).astype(np.int8)
        rows = np.hstack([base, label[:, None]])
    return rows


def partition_bound(bandwidth, option: str = "bandwidth") -> float:
    """min over partitions P (k >= 2 parts) of c(edges between parts) / (k - 1): no forest's
    rate exceeds it (see the module docstring). inf for one worker."""
    matrix = check_bandwidth(bandwidth, option)
    n = len(matrix)
    if n == 1:
        return math.inf
    if n > PARTITION_LIMIT:
        raise ValueError(f"{option} has {n} workers: partition_bound enumerates partitions "
                         f"only up to {PARTITION_LIMIT} workers")
    u, v, cap = edge_capacities(matrix)
    labels = partitions(n)
    parts = labels.max(axis=1).astype(float)  # k - 1
    between = (labels[:, u] != labels[:, v]).astype(float) @ cap
    keep = parts > 0
    return float(np.min(between[keep] / parts[keep]))


def two_way_cut(bandwidth, option: str = "bandwidth", egress=None, ingress=None) -> float:
    """min over sets S of min(B(S -> rest), B(rest -> S)), each also capped by the NICs
    (`egress`, `ingress` as for `check_nics`): no all-reduce algorithm exceeds this rate (see
    the module docstring). inf for one worker."""
    matrix = check_bandwidth(bandwidth, option)
    n = len(matrix)
    if n == 1:
        return math.inf
    if n > CUT_LIMIT:
        raise ValueError(f"{option} has {n} workers: two_way_cut enumerates cuts only up to "
                         f"{CUT_LIMIT} workers")
    sets = (np.arange(1, 2 ** (n - 1))[:, None] >> np.arange(n - 1)) & 1  # worker n-1 outside
    inside = np.hstack([sets, np.zeros((len(sets), 1), dtype=sets.dtype)]).astype(float)
    # An unlimited NIC passes at most the worker's links.
    send = np.minimum(check_nics(egress, n, "egress"), matrix.sum(axis=1))
    receive = np.minimum(check_nics(ingress, n, "ingress"), matrix.sum(axis=0))
    out = np.minimum(np.einsum("si,ij,sj->s", inside, matrix, 1 - inside),
                     np.minimum(inside @ send, (1 - inside) @ receive))
    back = np.minimum(np.einsum("si,ij,sj->s", 1 - inside, matrix, inside),
                      np.minimum((1 - inside) @ send, inside @ receive))
    return float(np.minimum(out, back).min())


def pack_forest(bandwidth, tol: float = 1e-6, min_share: float = 1e-3,
                max_iterations: int = 1000, option: str = "bandwidth", egress=None,
                ingress=None) -> Forest:
    """The forest of largest total rate on `bandwidth` and the NICs `egress`, `ingress` (see
    `check_nics`; None: none) (see the module docstring), within relative `tol` of the LP
    optimum; trees carrying less than `min_share` of the total are
    dropped (fewer, larger partitions; the rest stays feasible). Deterministic: every worker
    computes the same forest from the same matrix."""
    from scipy.optimize import linprog

    matrix = check_bandwidth(bandwidth, option)
    for name, value, lo, hi in (("tol", tol, 0, 1), ("min_share", min_share, 0, 1)):
        if not (isinstance(value, (int, float)) and lo <= value < hi):
            raise ValueError(f"{name}={value!r} is not allowed: it must be in [{lo}, {hi})")
    check_int(max_iterations, "max_iterations", 1)
    n = len(matrix)
    nic = np.minimum(check_nics(egress, n, "egress"), check_nics(ingress, n, "ingress"))
    if n == 1:
        return Forest(((-1,),), (math.inf,), math.inf, math.inf)
    u, v, cap = edge_capacities(matrix)
    _check_connected(n, u, v, option)
    scale = cap.max()
    capped = np.flatnonzero(np.isfinite(nic))  # workers whose NIC is a constraint
    c = np.concatenate([cap, nic[capped]]) / scale  # edge rows, then NIC rows
    edges = len(cap)
    # incidence[k, e]: whether edge e touches capped worker k (a tree's degree there).
    incidence = ((u[None, :] == capped[:, None]) | (v[None, :] == capped[:, None])).astype(float)
    node_price = np.zeros((len(capped), n))
    node_price[np.arange(len(capped)), capped] = 1.0

    def weights(dual):  # w_uv = y_uv + z_u + z_v
        z = dual[edges:] @ node_price
        return dual[:edges] + z[u] + z[v]

    trees = [_spanning_tree(n, u, v, np.argsort(-cap, kind="stable"))]
    x, best_bound, center = np.zeros(1), math.inf, None
    for _ in range(max_iterations):
        a = np.zeros((len(c), len(trees)))
        for j, tree in enumerate(trees):
            a[tree, j] = 1.0
            a[edges:, j] = incidence[:, tree].sum(axis=1)
        res = linprog(-np.ones(len(trees)), A_ub=a, b_ub=c, bounds=(0, None), method="highs")
        if res.status != 0:
            raise RuntimeError(f"the packing LP failed: {res.message}")
        x, y = res.x, np.maximum(-res.ineqlin.marginals, 0.0)
        # Price at the duals smoothed towards the best dual so far (Wentges), which damps
        # their oscillation; where that finds no improving tree, price at the duals alone.
        for alpha in ((SMOOTHING, 0.0) if center is not None else (0.0,)):
            dual = y if alpha == 0 else alpha * center + (1 - alpha) * y
            prices = weights(dual)
            cheapest = _spanning_tree(n, u, v, np.lexsort((-cap, prices)))  # ties: wide edges
            cost = prices[cheapest].sum()
            if cost > 0 and c @ dual / cost < best_bound:
                best_bound, center = float(c @ dual / cost), dual / cost
            if weights(y)[cheapest].sum() < 1 - 1e-9:
                break
        else:
            break  # no tree improves the packing: it is optimal
        if x.sum() >= best_bound * (1 - tol):
            break
        trees.append(cheapest)
    keep = x > min_share * x.sum()
    parents, rates = [], []
    rooted = np.zeros(n)
    for j in sorted(np.flatnonzero(keep), key=lambda j: -x[j]):
        root, tree = _root(n, u[trees[j]], v[trees[j]], rooted)
        rooted[root] += x[j]
        parents.append(tree)
        rates.append(float(x[j] * scale))
    tight = n <= PARTITION_LIMIT and not len(capped)
    bound = partition_bound(matrix) if tight else best_bound * scale
    return Forest(tuple(parents), tuple(rates), bound, best_bound * scale)


def _root(n: int, u, v, rooted) -> tuple[int, tuple]:
    """Root a tree at a centre (fewest hops to its deepest worker; short pipelines), among
    centres at the worker that roots the least rate so far (spreads the roots)."""
    adj = [[] for _ in range(n)]
    for a, b in zip(u, v):
        adj[a].append(int(b))
        adj[b].append(int(a))

    def bfs(root):
        parent, depth, queue = [-2] * n, [0] * n, [root]
        parent[root] = -1
        for node in queue:
            for nxt in adj[node]:
                if parent[nxt] == -2:
                    parent[nxt], depth[nxt] = node, depth[node] + 1
                    queue.append(nxt)
        return tuple(parent), max(depth)

    shapes = [bfs(r) for r in range(n)]
    root = min(range(n), key=lambda r: (shapes[r][1], rooted[r], r))
    return root, shapes[root][0]
