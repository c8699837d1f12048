#!/bin/sh
# every CPU top-k selection recorded: hierarchical 100 Mbit/s then 1 Gbit/s (python: the venv's)
set -e
cd "$(dirname "$0")"
python rounds_topk.py 1e8 2 hier-100mbit-topk.jsonl 24 5 40 20 topk powersgd auto-two auto
python rounds_topk.py 1e9 2 hier-1gbit-topk.jsonl 24 5 40 20 topk powersgd auto-two auto
