"""`gradcomp topology`: all-reduce algorithms on network topologies."""
from ..evaluation.model.topology import compare, default_suite, load_topology
from .common import default_of, emit, positive_int, rate, table


def add_topology(tp) -> None:
    tp.add_argument("--topology", action="append", help="built-in (two-racks, random, "
                    "random:SEED: links only; homogeneous: a switched cluster, one NIC of "
                    "--bandwidth per worker) or a .json/.csv bandwidth matrix (bit/s, entry "
                    "i,j: a dedicated link i->j; JSON may add per-worker NICs as "
                    "\"egress_bps\"/\"ingress_bps\" and \"latency_s\"); repeatable (default: "
                    "two-racks, random:0..4, homogeneous)")
    tp.add_argument("--workers", type=positive_int, default=default_of(load_topology, "workers"),
                    help="workers of the built-ins")
    tp.add_argument("--bandwidth", type=rate, default=rate(default_of(load_topology, "bandwidth")),
                    help="link bandwidth of the built-ins (two-racks: the thin link is a tenth; "
                    "homogeneous: also every worker's NIC)")
    tp.add_argument("--nbytes", type=positive_int, default=100_000_000,
                    help="gradient bytes per worker (default: 100 MB)")
    tp.add_argument("--plot", help="also write a PNG of the completion times")
    tp.add_argument("--json", action="store_true", help="print machine-readable JSON")
    tp.set_defaults(run=_topology)


def _topology(args) -> None:
    specs = args.topology or default_suite()
    times = compare([load_topology(t, args.workers, args.bandwidth) for t in specs],
                    args.nbytes)
    text = table(times, ["topology", "workers", "trees", "forest_bps", "cut_bound_bps",
                         "bound", "forest_vs_cut", "ring_s", "tree_s", "ps_s", "forest_s",
                         "forest_speedup_vs_ring"])
    if args.plot:
        from ..evaluation.report.plots import allreduce_times

        text += f"\n\nwrote {allreduce_times(times, args.plot)}"
    emit(args, times.to_dict("records"), text)
