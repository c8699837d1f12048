# From the repository root: seeds 0..29 in chunks of 5 (about 11 CPU minutes on the 2-core
# AMD EPYC VM), niced beside other work, then summary.md.
HERE=benchmarks/results/auto-cands-2026-11-28
nice -n 10 python $HERE/run.py $HERE 30 5
python $HERE/summary.py
