"""`../testbed-two-tier-2026-11-29-turns/same_job_margin.py` (the margin folder's
`same_job.py` with `auto-margin-2`: candidates priced within three times a bucket's best join
the rounds) with one more variant beside `auto` (whose defaults now race its close contenders
on for up to 20 rounds): `auto-5`, its rounds stopped at 5 as before (`confirm_max_rounds`
5), in both layouts (`flat-` without the hierarchical one). The same arguments:

    python same_job_racing.py RATE_BPS JOBS OUT.jsonl ROUNDS BLOCK WARMUP VARIANT [VARIANT ...]
"""
import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(  # it adds auto-margin-2 to same_job.py's
    "same_job_margin",
    os.path.join(HERE, "..", "testbed-two-tier-2026-11-29-turns", "same_job_margin.py"))
margin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(margin)
same_job = margin.same_job
for prefix, layout in (("", same_job.HIER), ("flat-", {})):
    same_job.VARIANTS[prefix + "auto-5"] = ("auto", {"confirm_max_rounds": 5, **layout})
same_job.__file__ = os.path.abspath(__file__)  # its jobs run this script, with these variants


def main(argv: list[str]) -> None:
    """`same_job.py`'s command line: a sweep, or (``--job``) one job on every rank."""
    if argv[1] == "--job":
        same_job.job(argv[2], int(argv[3]), int(argv[4]), int(argv[5]), argv[6:])
    else:
        same_job.main(float(argv[1]), int(argv[2]), argv[3], *argv[4:7], argv[7:])


if __name__ == "__main__":
    main(sys.argv)
