#!/bin/sh
# code 08bd423 (top-k's selection buffers kept per key): hierarchical 1 Gbit/s, every CPU
# top-k selection recorded with its page faults and CPU time (python: the venv's)
set -e
cd "$(dirname "$0")"
python rounds_topk.py 1e9 4 hier-1gbit-kept.jsonl 24 5 40 20 topk powersgd bf16 auto-two auto
