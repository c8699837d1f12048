#!/bin/sh
# auto racing with contenders dropped 3 standard errors behind, beside auto-5, in the same
# jobs as the fixed hooks (code e09baa8; same_job_behind3.py): ROUNDS sittings (default 1).
set -e
cd "$(dirname "$0")"
for sitting in $(seq "${ROUNDS:-1}"); do
  python same_job_behind3.py 1e9 1 hier-1gbit-behind3.jsonl 24 5 40 topk powersgd bf16 auto \
    auto-5
  python same_job_behind3.py 2.5e9 1 flat-2.5gbit-behind3.jsonl 24 5 40 flat-none flat-bf16 \
    flat-topk flat-powersgd flat-auto flat-auto-5
  python same_job_behind3.py 2.5e9 1 hier-2.5gbit-behind3.jsonl 24 5 40 none bf16 topk \
    powersgd auto auto-5
  python same_job_behind3.py 1e9 1 flat-1gbit-behind3.jsonl 24 5 40 flat-topk flat-powersgd \
    flat-bf16 flat-auto flat-auto-5
  python same_job_behind3.py 1e8 1 hier-100mbit-behind3.jsonl 24 5 40 topk powersgd auto \
    auto-5
  python same_job_behind3.py 1e8 1 flat-100mbit-behind3.jsonl 24 5 40 flat-topk \
    flat-powersgd flat-auto flat-auto-5
done
