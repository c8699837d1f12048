"""The cluster a question is asked about: nodes of identical GPUs joined inside the node by
NVLink or PCIe and across nodes by one or more NICs (rails) that the node's GPUs share.

A `Cluster` is one node kind; `Cluster.network(nodes)` is the performance model's `Network`
of that many nodes. Built-in presets (`PRESETS`) carry the published figures of their
instance or system, cited beside each; what the specification does not publish (latencies,
the fraction of line rate a transport reaches, how much slower compute runs distributed) is
left at the neutral value and said so (`Cluster.describe`): efficiency 1 and slowdown 1 are
assumptions until `bench collective` / `bench train` fit them on the user's cluster.

The JSON form (`load_cluster`) holds the same fields: ``{"name": "...", "gpu": "A100",
"gpus_per_node": 8, "intra_bandwidth": "300GB", "bandwidth": "100gbit", "rails": 4,
"latency_s": 5e-6, "intra_latency_s": 2e-6, "efficiency": 0.8, "intra_efficiency": 0.9,
"compute_slowdown": 1.05, "source": "..."}``; rates as `units.parse_rate` reads them
(``300GB`` is bytes/s). One GPU per node with a single NIC is the flat network of the old
``--workers``/``--bandwidth`` options.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path

from ...checks import check_int
from ..common.units import format_rate, parse_rate
from .network import Network


@dataclass(frozen=True)
class Cluster:
    """One node kind. Rates in bit/s (strings such as "25gbit" are parsed); `bandwidth_bps`
    is one NIC's line rate, `rails` NICs per node; `intra_bandwidth_bps` one GPU's bandwidth
    to the others of its node, per direction; efficiencies are fractions of line rate the
    transport reaches per tier; `compute_slowdown` >= 1 how much slower a distributed
    worker computes than a single one; `measured` names the fields fitted on the cluster
    (the rest come from the preset or are assumed)."""

    name: str
    gpu: str
    gpus_per_node: int
    bandwidth_bps: float
    intra_bandwidth_bps: float | None = None
    rails: int = 1
    latency_s: float = 0.0
    intra_latency_s: float = 0.0
    efficiency: float = 1.0
    intra_efficiency: float = 1.0
    compute_slowdown: float = 1.0
    source: str = ""
    measured: tuple = ()

    def __post_init__(self):
        for option in ("bandwidth_bps", "intra_bandwidth_bps"):
            value = getattr(self, option)
            if value is not None:
                object.__setattr__(self, option, parse_rate(value, option[:-4]))
        self.network(1)  # the Network's checks of every field

    def tiers(self) -> dict:
        """The `Network` fields beyond workers, bandwidth, latency and efficiency, where they
        differ from the flat network's (one GPU per node, one NIC, no slowdown)."""
        flat = {"gpus_per_node": 1, "rails": 1, "intra_bandwidth_bps": None,
                "intra_latency_s": 0.0, "intra_efficiency": 1.0, "compute_slowdown": 1.0}
        return {k: getattr(self, k) for k, v in flat.items() if getattr(self, k) != v}

    @property
    def device(self) -> str:
        """The GPU as a device name ("NVIDIA A100 40GB"; "" when the cluster names none)."""
        return f"NVIDIA {self.gpu}" if self.gpu else ""

    def question(self, nodes: int) -> dict:
        """The analyses' network keywords (workers, bandwidth, latency_s, efficiency, tiers)
        for `nodes` such nodes."""
        return dict(workers=nodes * self.gpus_per_node, bandwidth=self.bandwidth_bps,
                    latency_s=self.latency_s, efficiency=self.efficiency, tiers=self.tiers())

    def network(self, nodes: int) -> Network:
        """The model's network of `nodes` such nodes."""
        check_int(nodes, "nodes", 1)
        return Network(nodes * self.gpus_per_node, self.bandwidth_bps, self.latency_s,
                       self.efficiency, **self.tiers())

    def describe(self, nodes: int) -> str:
        """One line: the layout, both tiers, and where efficiency and slowdown come from."""
        g, rate = self.gpus_per_node, format_rate(self.bandwidth_bps)
        nics = f"{self.rails} x {rate} NICs" if self.rails > 1 else f"one {rate} NIC"
        if g == 1:
            layout = (f"{nodes} workers at {rate} (one GPU per node, one NIC each)"
                      if self.name == "flat" and self.rails == 1 else
                      f"{nodes} workers (one GPU per node, {nics} each)" if self.name == "flat"
                      else f"{nodes} x {self.name} ({self.gpu or 'one GPU'}, {nics})")
        else:
            head = f"{nodes} nodes" if self.name == "flat" else f"{nodes} x {self.name}"
            gpus = " ".join(filter(None, [str(nodes * g), self.gpu, "GPUs"]))
            layout = (f"{head}: {gpus}, {g} per node "
                      f"at {self.intra_bandwidth_bps / 8e9:.3g} GB/s inside, {nics} per node "
                      "(two-tier collectives: modelled, not yet validated by measurement)")
        origin = {f: ("fitted" if f in self.measured else
                      "assumed" if getattr(self, f) == 1.0 else "given")
                  for f in ("efficiency", "compute_slowdown")}
        latency = (f", latency {self.latency_s * 1e6:g} us per hop" if self.latency_s else "")
        return (f"{layout}{latency}; network efficiency {self.efficiency:.2f} "
                f"({origin['efficiency']}), compute slowdown {self.compute_slowdown:.2f} "
                f"({origin['compute_slowdown']})")


_GB = 8e9  # one GB/s in bit/s

#: Published node specifications. NVLink figures are the datasheets' bidirectional totals
#: halved (a ring sends one way): V100 SXM2 NVLink 300 GB/s (NVIDIA Tesla V100 datasheet),
#: A100 NVLink 600 GB/s (NVIDIA A100 datasheet), H100 SXM NVLink 900 GB/s (NVIDIA H100
#: datasheet). NICs: the AWS EC2 instance-type pages (P3: "Network Performance" 10, 25 and
#: 100 Gbps; P4d: 400 Gbps EFA as 4 x 100 Gbps) and the NVIDIA DGX H100 user guide (8 x
#: ConnectX-7 at 400 Gbit/s InfiniBand NDR). Latency, efficiency and slowdown are not in
#: these specifications.
PRESETS = {
    "p3.8xlarge": Cluster("p3.8xlarge", "V100", 4, "10gbit", 150 * _GB,
                          source="AWS EC2 P3: 4 x V100 16 GB, NVLink, 10 Gbps"),
    "p3.16xlarge": Cluster("p3.16xlarge", "V100", 8, "25gbit", 150 * _GB,
                           source="AWS EC2 P3: 8 x V100 16 GB, NVLink, 25 Gbps"),
    "p3dn.24xlarge": Cluster("p3dn.24xlarge", "V100", 8, "100gbit", 150 * _GB,
                             source="AWS EC2 P3dn: 8 x V100 32 GB, NVLink, 100 Gbps"),
    "p4d.24xlarge": Cluster("p4d.24xlarge", "A100 40GB", 8, "100gbit", 300 * _GB, rails=4,
                            source="AWS EC2 P4d: 8 x A100 40 GB, NVSwitch 600 GB/s, "
                                   "400 Gbps EFA (4 x 100 Gbps)"),
    "h100-8x400ib": Cluster("h100-8x400ib", "H100", 8, "400gbit", 450 * _GB, rails=8,
                            source="NVIDIA DGX H100: 8 x H100 SXM, NVLink 900 GB/s, "
                                   "8 x 400 Gbit/s InfiniBand NDR"),
}

#: The JSON keys (rates as strings or bit/s) and the Cluster fields they set.
_KEYS = {"name": "name", "gpu": "gpu", "gpus_per_node": "gpus_per_node",
         "bandwidth": "bandwidth_bps", "intra_bandwidth": "intra_bandwidth_bps",
         "rails": "rails", "latency_s": "latency_s", "intra_latency_s": "intra_latency_s",
         "efficiency": "efficiency", "intra_efficiency": "intra_efficiency",
         "compute_slowdown": "compute_slowdown", "source": "source"}


def load_cluster(spec) -> Cluster:
    """A preset name (`PRESETS`), a `.json` file of the module docstring's form, or a
    Cluster as is."""
    if isinstance(spec, Cluster):
        return spec
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(str(spec))
    if path.suffix.lower() != ".json" or not path.is_file():
        raise ValueError(f"cluster={spec!r} is not allowed: choose a preset "
                         f"({', '.join(PRESETS)}) or an existing .json file")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"cluster={spec!r}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"cluster={spec!r}: give a JSON object with keys {', '.join(_KEYS)}")
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise ValueError(f"cluster={spec!r}: unknown key(s) {', '.join(unknown)}; allowed: "
                         f"{', '.join(_KEYS)}")
    values = {"name": path.stem, "gpu": "", "gpus_per_node": 1,
              **{_KEYS[k]: v for k, v in data.items()}}
    if "bandwidth_bps" not in values:
        raise ValueError(f"cluster={spec!r}: the key 'bandwidth' (one NIC's rate) is required")
    try:
        return Cluster(**values)
    except TypeError as exc:
        raise ValueError(f"cluster={spec!r}: {exc}") from None


def resolve_cluster(cluster=None, workers: int | None = None, nodes: int | None = None,
                    default_workers: int = 8, default_bandwidth="10gbit",
                    **overrides) -> tuple[Cluster, int]:
    """(Cluster, nodes) of a question: `cluster` (a preset, file or Cluster; None: the flat
    network, one GPU per node) with `overrides` (Cluster fields; None: kept), and the node
    count from `nodes` or `workers` (GPUs, a multiple of the node's), else
    `default_workers` GPUs."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if cluster is None:
        base = Cluster("flat", "", given.pop("gpus_per_node", 1),
                       given.pop("bandwidth_bps", default_bandwidth),
                       given.pop("intra_bandwidth_bps", None))
    else:
        base = load_cluster(cluster)
    chosen = with_options(base, **given)
    if nodes is None and workers is None:
        workers = default_workers if cluster is None else None
        nodes = None if cluster is None else 1
    return chosen, nodes_for(chosen, workers, nodes)


def with_options(cluster: Cluster, **options) -> Cluster:
    """`cluster` with the given fields replaced (None: kept), e.g. command-line overrides;
    a preset's name gains a "+" when one of its published figures was changed."""
    given = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(given) - {f.name for f in fields(Cluster)})
    if unknown:
        raise ValueError(f"unknown cluster field(s) {', '.join(unknown)}")
    if not given:
        return cluster
    changed = any(getattr(cluster, k) != v for k, v in given.items()
                  if k not in ("measured", "source"))
    name = cluster.name + ("+" if changed and cluster.name in PRESETS else "")
    return replace(cluster, name=name, **given)


def nodes_for(cluster: Cluster, workers: int | None, nodes: int | None) -> int:
    """The node count from `nodes`, or from `workers` (a multiple of the node's GPUs)."""
    g = cluster.gpus_per_node
    if nodes is not None:
        check_int(nodes, "nodes", 1)
        if workers is not None and workers != nodes * g:
            raise ValueError(f"workers={workers} is not allowed with nodes={nodes} of {g} GPUs "
                             f"(that is {nodes * g} workers): give one of --workers, --nodes")
        return nodes
    check_int(workers, "workers", 1)
    if workers % g:
        raise ValueError(f"workers={workers} is not allowed: {cluster.name} nodes hold {g} "
                         f"GPUs each, so workers must be a multiple of {g} (or give --nodes)")
    return workers // g
