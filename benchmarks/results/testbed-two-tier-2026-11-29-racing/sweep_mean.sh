#!/bin/sh
# auto's turns timed by the ranks' mean (same_job_mean.py, code 8487d24) between nodes at
# 1 Gbit/s and 100 Mbit/s, where the slowest rank's timed top-k 8-10% worse against PowerSGD
# than their fixed hooks: ROUNDS sittings (default 3), each one job per rate.
set -e
cd "$(dirname "$0")"
for sitting in $(seq "${ROUNDS:-3}"); do
  python same_job_mean.py 1e9 1 hier-1gbit-mean.jsonl 24 5 40 topk powersgd bf16 auto
  python same_job_mean.py 1e8 1 hier-100mbit-mean.jsonl 24 5 40 topk powersgd auto
done
