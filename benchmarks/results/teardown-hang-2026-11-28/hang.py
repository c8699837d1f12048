"""The teardown hang on purpose: 2 gloo ranks, DDP with a gradcomp hook, a few steps, then the
group destroyed and DDP freed in one of three orders. Each try runs in a child forked from this
rank's process (torch imported once); a child that has not exited REPRO_TIMEOUT s (default 20)
after its teardown began counts as hung: its stacks are dumped (py-spy --native, where the
environment has it) and it is killed. Run both ranks (README.md):

    python hang.py RANK DIR VARIANT METHOD TRIES

VARIANT: after  (destroy_process_group, then del ddp + gc.collect: the bug's order)
         before (del ddp + gc.collect, then destroy_process_group: the fix)
         return (destroy_process_group, then ddp freed as the function holding it returns)
         exit   (destroy_process_group, ddp kept in a module global, then the child exits
                 through the interpreter's own teardown: a user's script)
"""
import gc
import os
import subprocess
import sys
import time
import weakref

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp.comm

TIMEOUT = float(os.environ.get("REPRO_TIMEOUT", "20"))
STEPS = int(os.environ.get("REPRO_STEPS", "5"))
KEPT = []


def child(rank, folder, variant, method, run, w):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/store-{variant}-{method}-{run}",
                            rank=rank, world_size=2)
    torch.manual_seed(0)
    ddp = DDP(nn.Sequential(nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                            nn.Linear(256, 1)), bucket_cap_mb=0.1)
    options = {"rank": 2} if method == "powersgd" else {"ratio": 0.05} if method == "topk" else {}
    state = gradcomp.comm.register(ddp, method, start_iter=0, **options)
    alive = weakref.ref(ddp)
    x = torch.randn(64, 20)
    for _ in range(STEPS):
        ddp(x).square().mean().backward()
    os.write(w, b"T")  # teardown starts
    if variant == "before":
        del ddp, state
        survived_del = alive() is not None
        gc.collect()
        dist.destroy_process_group()
    elif variant == "after":
        dist.destroy_process_group()
        del ddp, state
        survived_del = alive() is not None
        gc.collect()
    elif variant == "return":  # ddp freed as this function returns
        dist.destroy_process_group()
        return None
    else:  # exit: kept in a module global, freed in the interpreter's teardown
        dist.destroy_process_group()
        KEPT.append((ddp, state))
        return None
    assert alive() is None
    return survived_del


def main():
    rank, folder, variant, method, tries = (int(sys.argv[1]), sys.argv[2], sys.argv[3],
                                            sys.argv[4], int(sys.argv[5]))
    import torch._dynamo  # noqa: F401 - DDP's constructor imports it: once, before the forks
    gc.freeze()
    hung, cycles, secs = 0, 0, []
    for run in range(tries):
        sys.stdout.flush()
        sys.stderr.flush()
        r, w = os.pipe()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            survived = child(rank, folder, variant, method, run, w)
            os.write(w, b"1" if survived else b"0")
            os.close(w)
            if variant == "exit":
                return  # falls off the script: the interpreter's teardown frees ddp
            os._exit(0)
        os.close(w)
        os.set_blocking(r, False)
        status, got, teardown = None, b"", None
        while True:
            try:
                got += os.read(r, 2)
            except BlockingIOError:
                pass
            if teardown is None and got.startswith(b"T"):
                teardown = time.monotonic()
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                status = os.waitstatus_to_exitcode(st)
                break
            now = time.monotonic()
            if (teardown is not None and now - teardown > TIMEOUT) or now - start > 300:
                break
            time.sleep(0.01)
        try:
            got += os.read(r, 2)
        except BlockingIOError:
            pass
        flag = got[1:2]
        os.close(r)
        secs.append(time.monotonic() - start)
        cycles += flag == b"1"
        if status is None and teardown is None:
            print(f"rank {rank} run {run}: did not reach teardown in 300 s", flush=True)
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        elif status is None:
            hung += 1
            spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
            if os.path.exists(spy):
                dump = subprocess.run([spy, "dump", "--native", "--pid", str(pid)],
                                      capture_output=True, text=True, timeout=60)
                with open(f"{folder}/hang-{variant}-{method}-{run}-rank{rank}.txt", "w") as f:
                    f.write(dump.stdout + dump.stderr)
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        elif status != 0:
            print(f"rank {rank} run {run}: exit {status}", flush=True)
    print(f"RESULT rank={rank} variant={variant} method={method} tries={tries} hung={hung} "
          f"ddp_survived_del={cycles} median_s={sorted(secs)[len(secs) // 2]:.2f}", flush=True)


if __name__ == "__main__":
    main()
