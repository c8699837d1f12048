#!/bin/sh
# auto with turns timed from iteration end to iteration end (code a1a45ae), in the margin
# folder's same-job design: ROUNDS sittings (default 3), each one job per rate and layout,
# the misses of that folder first (python: the venv's).
set -e
cd "$(dirname "$0")"
JOB=../testbed-two-tier-2026-11-29-margin/same_job.py
for sitting in $(seq "${ROUNDS:-3}"); do
  python $JOB 2.5e9 1 flat-2.5gbit-same-job.jsonl 24 5 40 flat-none flat-bf16 flat-topk \
    flat-powersgd flat-auto
  python $JOB 1e9 1 hier-1gbit-same-job.jsonl 24 5 40 topk powersgd bf16 auto
  python $JOB 2.5e9 1 hier-2.5gbit-same-job.jsonl 24 5 40 none bf16 topk powersgd auto
  python $JOB 1e9 1 flat-1gbit-same-job.jsonl 24 5 40 flat-topk flat-powersgd flat-bf16 \
    flat-auto
  python $JOB 1e8 1 hier-100mbit-same-job.jsonl 24 5 40 topk powersgd auto
  python $JOB 1e8 1 flat-100mbit-same-job.jsonl 24 5 40 flat-topk flat-powersgd flat-auto
done
