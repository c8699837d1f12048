#!/bin/sh
# auto (its defaults) in the same jobs as the fixed hooks, with top-k's selection buffers kept
# (code 08bd423 + this folder's scripts): ROUNDS sittings (default 3), each one job per rate
# and layout, the racing folder's design and fixed hooks (python: the venv's).
set -e
cd "$(dirname "$0")"
RUN="python ../testbed-two-tier-2026-11-29-racing/same_job_racing.py"
for sitting in $(seq "${ROUNDS:-3}"); do
  $RUN 1e9 1 same-job-hier-1gbit.jsonl 24 5 40 topk powersgd bf16 auto
  $RUN 2.5e9 1 same-job-flat-2.5gbit.jsonl 24 5 40 flat-none flat-bf16 flat-topk \
    flat-powersgd flat-auto
  $RUN 2.5e9 1 same-job-hier-2.5gbit.jsonl 24 5 40 none bf16 topk powersgd auto
  $RUN 1e9 1 same-job-flat-1gbit.jsonl 24 5 40 flat-topk flat-powersgd flat-bf16 flat-auto
  $RUN 1e8 1 same-job-hier-100mbit.jsonl 24 5 40 topk powersgd auto
  $RUN 1e8 1 same-job-flat-100mbit.jsonl 24 5 40 flat-topk flat-powersgd flat-auto
done
