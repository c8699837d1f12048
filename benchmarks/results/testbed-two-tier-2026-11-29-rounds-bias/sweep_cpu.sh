#!/bin/sh
# selections with page faults and thread CPU time: hierarchical 1 Gbit/s (python: the venv's)
set -e
cd "$(dirname "$0")"
python rounds_topk.py 1e9 2 hier-1gbit-cpu.jsonl 24 5 40 20 topk powersgd auto-two auto
