#!/bin/bash
# loop.sh EXAMPLE TAG COUNT: COUNT plain launches of docs/trainers.md's train_EXAMPLE.py
# (accelerate or lightning) on 2 CPU processes, as tests/test_integrations.py's straight runs
# launch them, in /tmp/hex/loops/TAG. One line per launch: exit status (124: over 120 s, a
# hang), how many "terminate called" lines, whether "compressed iterations: 32" appeared, wall
# seconds. Waits while /work/wt/QUIET exists or `gradcomp validate` runs (HELPERS.md).
set -u
example=$1 tag=$2 count=$3
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
dir=/tmp/hex/loops/$tag && mkdir -p "$dir" && cd "$dir"
py=/work/main/.venv/bin/python  # the shared venv; PYTHONPATH picks this checkout's gradcomp
"$py" - "$repo/docs/trainers.md" "train_$example.py" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
(block,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S)
            if b.startswith(f"# {sys.argv[2]}")]
open(sys.argv[2], "w").write(block)
PY
export PYTHONPATH=$repo OMP_NUM_THREADS=1 ACCELERATE_USE_CPU=1 \
       PYTHONWARNINGS=ignore::DeprecationWarning
for i in $(seq "$count"); do
  while test -e /work/wt/QUIET || pgrep -f "gradcomp validate" >/dev/null; do sleep 30; done
  rm -rf checkpoints lightning_logs
  start=$(date +%s.%N)
  if [ "$example" = accelerate ]; then
    port=$((20000 + RANDOM % 20000))
    timeout -k 10 120 "$py" -m accelerate.commands.launch --multi_gpu --num_processes 2 \
      --num_machines 1 --mixed_precision no --dynamo_backend no --main_process_port $port \
      train_accelerate.py 2 > out.txt 2>&1
  else
    timeout -k 10 120 "$py" train_lightning.py 2 > out.txt 2>&1
  fi
  rc=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  echo "$rc $(grep -c 'terminate called' out.txt) $(grep -c 'compressed iterations: 32' out.txt) $secs"
  [ $rc -ne 0 ] && cp out.txt fail-$i-$(date +%s).txt
done
