#!/bin/sh
# The second sweep (turns of two iterations): ROUNDS sittings, each one job per rate and
# layout (python: the venv's).
set -e
cd "$(dirname "$0")"
for sitting in $(seq "${ROUNDS:-3}"); do
  for layout in "" flat-; do
    python same_job.py 1e8 1 "${layout:-hier-}100mbit-2.jsonl" 24 5 40 ${layout}topk \
      ${layout}powersgd ${layout}auto ${layout}auto-rounds-10
    python same_job.py 1e9 1 "${layout:-hier-}1gbit-2.jsonl" 24 5 40 ${layout}topk \
      ${layout}powersgd ${layout}bf16 ${layout}auto ${layout}auto-rounds-10
    python same_job.py 2.5e9 1 "${layout:-hier-}2.5gbit-2.jsonl" 24 5 40 ${layout}none \
      ${layout}bf16 ${layout}topk ${layout}powersgd ${layout}auto ${layout}auto-rounds-10
  done
done
