# From the repository root: seeds 0..39 in chunks of 5 (about 10 CPU minutes on the 2-core
# AMD EPYC VM), niced beside other work, then summary.md.
HERE=benchmarks/results/auto-cands-2026-11-28
nice -n 10 python $HERE/run.py $HERE 40 5
python $HERE/summary.py
