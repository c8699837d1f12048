#!/bin/sh
# The sweep: ROUNDS sittings, each one job per rate and layout (python: the venv's).
set -e
cd "$(dirname "$0")"
for sitting in $(seq "${ROUNDS:-1}"); do
  for layout in "" flat-; do
    python same_job.py 1e8 1 "${layout:-hier-}100mbit.jsonl" 24 5 40 ${layout}topk \
      ${layout}powersgd \
      ${layout}auto ${layout}auto-margin-0.25 ${layout}auto-every-step
    python same_job.py 1e9 1 "${layout:-hier-}1gbit.jsonl" 24 5 40 ${layout}topk ${layout}powersgd \
      ${layout}bf16 ${layout}auto ${layout}auto-margin-0.25 ${layout}auto-every-step
    python same_job.py 2.5e9 1 "${layout:-hier-}2.5gbit.jsonl" 24 5 40 ${layout}none ${layout}bf16 \
      ${layout}topk ${layout}powersgd ${layout}auto ${layout}auto-margin-0.25 \
      ${layout}auto-every-step
  done
done
