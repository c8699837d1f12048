# Four interleaved passes at 1 Gbit/s between 2 nodes of 2 ranks (flat layout), each a testbed
# job of its own (run from the repository root, as root), with the 2-worker folder's run.py.
HERE=benchmarks/results/auto-route-two-tier-2026-11-28
for pass in "0 ABDE" "1 EDBA" "2 BEAD" "3 DAEB"; do
  set -- $pass
  gradcomp testbed --nodes 2 --gpus-per-node 2 --rate 1gbit -- \
      python benchmarks/results/auto-route-2026-11-28/run.py $1 $2 1e9 $HERE/train-1gbit.csv
done
