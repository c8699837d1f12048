"""`gradcomp fit`: the model's cost parameters from a measurement table."""
from ..evaluation.model.fit import fit_codec, fit_collectives, summary
from .common import emit, read_measurements, table


def add_fit(sub) -> None:
    fi = sub.add_parser("fit", help="fit a + b*numel per method (a compress table) or alpha, "
                        "beta per collective (a collective table); prints R^2")
    fi.add_argument("table", help="CSV written by `gradcomp bench compress|collective`")
    fi.add_argument("--json", action="store_true", help="print machine-readable JSON")
    fi.set_defaults(run=_fit)


def _fit(args) -> None:
    frame = read_measurements(args.table, "table", "a CSV written by `gradcomp bench compress` or "
                       "`gradcomp bench collective`")
    fits = fit_collectives(frame) if "collective" in frame.columns else fit_codec(frame)
    fitted = summary(fits)
    emit(args, fitted.to_dict("records"), table(fitted, fitted.columns))
