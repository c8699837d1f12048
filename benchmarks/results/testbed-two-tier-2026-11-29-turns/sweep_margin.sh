#!/bin/sh
# auto with confirm_margin 1.0 (the default) and 2.0 in the same jobs (code a1a45ae):
# ROUNDS sittings (default 2), each one job per rate and layout (python: the venv's).
set -e
cd "$(dirname "$0")"
for sitting in $(seq "${ROUNDS:-2}"); do
  python same_job_margin.py 1e9 1 hier-1gbit-margin.jsonl 24 5 40 topk powersgd bf16 auto \
    auto-margin-2
  python same_job_margin.py 2.5e9 1 flat-2.5gbit-margin.jsonl 24 5 40 flat-none flat-bf16 \
    flat-topk flat-powersgd flat-auto flat-auto-margin-2
  python same_job_margin.py 2.5e9 1 hier-2.5gbit-margin.jsonl 24 5 40 none bf16 topk powersgd \
    auto auto-margin-2
  python same_job_margin.py 1e9 1 flat-1gbit-margin.jsonl 24 5 40 flat-topk flat-powersgd \
    flat-bf16 flat-auto flat-auto-margin-2
  python same_job_margin.py 1e8 1 hier-100mbit-margin.jsonl 24 5 40 topk powersgd auto \
    auto-margin-2
  python same_job_margin.py 1e8 1 flat-100mbit-margin.jsonl 24 5 40 flat-topk flat-powersgd \
    flat-auto flat-auto-margin-2
done
