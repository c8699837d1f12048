"""`gradcomp fit`: the model's cost parameters from a measurement table."""
from ..evaluation.analyses.cluster_fit import fit_tiers
from ..evaluation.model.fit import fit_codec, fit_collectives, summary
from .common import emit, rate, read_measurements, table


def add_fit(fi) -> None:
    fi.add_argument("table", help="CSV written by `gradcomp bench compress|collective`")
    fi.add_argument("--tiers", action="store_true", help="a collective table: the cluster's "
                    "latency and efficiency (busbw / line rate) per tier (column tier: inter, "
                    "intra) from its all-reduce rows")
    fi.add_argument("--bandwidth", type=rate, help="--tiers: the line rate of inter-node rows "
                    "without a bandwidth_bps column (e.g. a testbed's rate)")
    fi.add_argument("--json", action="store_true", help="print machine-readable JSON")
    fi.set_defaults(run=_fit)


def _fit(args) -> None:
    frame = read_measurements(args.table, "table", "a CSV written by `gradcomp bench "
                              "compress` or `gradcomp bench collective`")
    if (args.tiers or args.bandwidth is not None) and "collective" not in frame.columns:
        raise ValueError("--tiers and --bandwidth are not allowed with a compress table: "
                         "give a table of `gradcomp bench collective`")
    if args.bandwidth is not None and not args.tiers:
        raise ValueError("--bandwidth is not allowed without --tiers")
    if args.tiers:
        fitted = fit_tiers(frame, args.bandwidth)
        emit(args, fitted.to_dict("records"), table(fitted, fitted.columns))
        return
    fits = fit_collectives(frame) if "collective" in frame.columns else fit_codec(frame)
    fitted = summary(fits)
    emit(args, fitted.to_dict("records"), table(fitted, fitted.columns))
