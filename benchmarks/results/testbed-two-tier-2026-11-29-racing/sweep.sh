#!/bin/sh
# auto racing its close contenders (the default), stopped at 5 rounds (as before) and racing
# with confirm_margin 2.0, in the same jobs as the fixed hooks (code 360d1c0): ROUNDS sittings
# (default 2), each one job per rate and layout (python: the venv's).
set -e
cd "$(dirname "$0")"
AUTOS="auto auto-5 auto-margin-2"
FLAT="flat-auto flat-auto-5 flat-auto-margin-2"
for sitting in $(seq "${ROUNDS:-2}"); do
  python same_job_racing.py 1e9 1 hier-1gbit.jsonl 24 5 40 topk powersgd bf16 $AUTOS
  python same_job_racing.py 2.5e9 1 flat-2.5gbit.jsonl 24 5 40 flat-none flat-bf16 \
    flat-topk flat-powersgd $FLAT
  python same_job_racing.py 2.5e9 1 hier-2.5gbit.jsonl 24 5 40 none bf16 topk powersgd $AUTOS
  python same_job_racing.py 1e9 1 flat-1gbit.jsonl 24 5 40 flat-topk flat-powersgd \
    flat-bf16 $FLAT
  python same_job_racing.py 1e8 1 hier-100mbit.jsonl 24 5 40 topk powersgd $AUTOS
  python same_job_racing.py 1e8 1 flat-100mbit.jsonl 24 5 40 flat-topk flat-powersgd $FLAT
done
