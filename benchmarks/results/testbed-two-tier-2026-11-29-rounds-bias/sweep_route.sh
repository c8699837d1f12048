#!/bin/sh
# auto's settled route between nodes (code c304025): top-k's hook against auto with top-k as
# its one candidate, with and without the slowdown check, hierarchical 1 Gbit/s, the
# same-job folder's script (python: the venv's)
set -e
cd "$(dirname "$0")"
python ../testbed-two-tier-2026-11-29-same-job/same_job.py 1e9 4 route-hier-1gbit.jsonl \
  24 5 60 topk auto-topk auto-topk-no-slowdown
