"""`gradcomp run` (the main job: measure, fit, report) and `gradcomp report` (rewrite the
report of a results folder)."""
from .common import METHODS_HELP, cluster_of, costs_option, emit, method_list, network_options


def add_run(rn) -> None:
    network_options(rn)
    rn.add_argument("--out", help="results folder (default: results/<timestamp>); an "
                    "existing one is resumed, finished rows are skipped")
    rn.add_argument("--full", action="store_true", help="full sweeps instead of the quick "
                    "default (minutes on 2 CPU cores)")
    costs_option(rn, measured=True)
    rn.add_argument("--methods", help=METHODS_HELP + "; measured and priced (default: all, "
                    "with their default options)")
    rn.set_defaults(run=_run)


def add_report(re_) -> None:
    network_options(re_)
    re_.add_argument("results", help="a folder written by `gradcomp run`")
    re_.add_argument("--out", help="a new folder for this report: the measurement tables are "
                     "copied there, and the results folder's own report stays as it was")
    re_.add_argument("--force", action="store_true", help="rewrite the results folder's own "
                     "report.md and figures (without it, a folder holding a report is refused)")
    costs_option(re_, measured=True)
    re_.add_argument("--methods", help=METHODS_HELP + "; priced (default: the methods of the "
                     "folder's compress.csv)")
    re_.set_defaults(run=_report)


def _run(args) -> None:
    from ..evaluation.run import run

    report = run(args.out, quick=not args.full, profile=args.profile,
                 bucketing=args.bucketing, progress=not args.json, costs=args.costs,
                 cluster=cluster_of(args), methods=method_list(args.methods))
    emit(args, {"results": str(report.folder), "report": str(report.path),
                "verdicts": list(report.verdicts)},
         f"results in {report.folder}\nreport: {report.path}\n\n" + "\n".join(report.verdicts))


def _report(args) -> None:
    from ..evaluation.report.report import write_report

    methods, cluster = method_list(args.methods), cluster_of(args)  # bad input first
    report = write_report(_report_folder(args), profile=args.profile,
                          bucketing=args.bucketing, costs=args.costs, cluster=cluster,
                          methods=methods)
    emit(args, {"report": str(report.path), "verdicts": list(report.verdicts)},
         f"wrote {report.path}\n\n" + "\n".join(report.verdicts))


def _report_folder(args):
    """Where `report` writes: a copy of the tables in --out, else the results folder, which
    must not hold a report already unless --force (a measured report is never lost)."""
    from ..evaluation.report.report import check_results, copy_measurements

    if args.out:
        return copy_measurements(args.results, args.out)
    if (check_results(args.results) / "report.md").exists() and not args.force:
        raise ValueError(f"results={args.results!r} holds a report already (report.md): give "
                         "--out NEW_FOLDER to write this one beside it, or --force to rewrite "
                         "it")
    return args.results
