#!/bin/sh
# code at this folder's first commit: hierarchical 1 Gbit/s then 100 Mbit/s (python: the venv's)
set -e
cd "$(dirname "$0")"
python rounds_hook.py 1e9 3 hier-1gbit.jsonl 24 5 40 20 topk powersgd bf16 auto-two auto
python rounds_hook.py 1e8 2 hier-100mbit.jsonl 24 5 40 20 topk powersgd auto-two auto
