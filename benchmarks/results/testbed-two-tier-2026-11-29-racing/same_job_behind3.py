"""`same_job_racing.py` with auto's rounds dropping a contender only 3 standard errors behind
the fastest (`trial.still_close`'s `behind`; 2 in the code measured, 360d1c0): the whole job's
`auto` variants race so, `auto-5` (rounds stopped at 5) is the same either way. The same
arguments:

    python same_job_behind3.py RATE_BPS JOBS OUT.jsonl ROUNDS BLOCK WARMUP VARIANT [VARIANT ...]
"""
import functools
import importlib.util
import os
import sys

from gradcomp.comm.auto import choice, trial

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "same_job_racing", os.path.join(HERE, "same_job_racing.py"))
racing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(racing)
same_job = racing.same_job
choice.still_close = functools.partial(trial.still_close, behind=3.0)
same_job.__file__ = os.path.abspath(__file__)  # its jobs run this script, with the change

if __name__ == "__main__":
    if sys.argv[1] == "--job":
        same_job.job(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                     sys.argv[6:])
    else:
        same_job.main(float(sys.argv[1]), int(sys.argv[2]), sys.argv[3], *sys.argv[4:7],
                      sys.argv[7:])
