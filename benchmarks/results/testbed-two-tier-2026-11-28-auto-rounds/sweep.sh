#!/bin/bash
cd /work/main
echo "start $(date -u +%T) $(git rev-parse --short HEAD)"
.venv/bin/gradcomp validate --nodes 2 --gpus-per-node 2 --rates 100mbit,1gbit,2.5gbit \
    --methods none,bf16,auto --out /tmp/m/two-tier-auto > /tmp/m/two-tier-auto.log 2>&1
echo "two-tier rc=$? $(date -u +%T)"
.venv/bin/gradcomp validate --methods none,bf16,auto --out /tmp/m/flat-auto > /tmp/m/flat-auto.log 2>&1
echo "flat rc=$? $(date -u +%T)"
