# Three interleaved passes per rate, each a testbed job of its own (run from the repository root).
HERE=benchmarks/results/auto-route-2026-11-28
for rate in 1gbit 100mbit; do
  bps=$([ $rate = 1gbit ] && echo 1e9 || echo 1e8)
  for pass in "0 ABCDE" "1 EDCBA" "2 CAEBD"; do
    set -- $pass
    gradcomp testbed --rate $rate -- python $HERE/run.py $1 $2 $bps $HERE/train-$rate.csv
  done
done
