"""The DDP job of ``bench/ddp_latency.py`` and ``tests/workloads/test_ddp_latency.py``:
run by ``torch.distributed.run`` (torchrun), one process per rank, gloo on CPU, each
rank in a network namespace of its own so that the collective's traffic crosses a real
link.

Every step is a forward, a backward (DDP all-reduces the gradients over gloo: the
collective) and an optimizer step on a tiny model built here (nothing is downloaded).
Rank 0 writes each step to the job's log (``LOG``: ``<unix time> step=<n>``, what the
throughput verifier reads) and to its own step timer (``TRUTH``: ``<n> <unix time>
<seconds the step took>``, the ground truth). It runs until it is stopped.

Arguments: ``LOG TRUTH``.
"""

import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
inputs, targets = torch.randn(32, 64), torch.randn(32, 8)
log = open(sys.argv[1], "a", buffering=1) if rank == 0 else None  # noqa: SIM115
truth = open(sys.argv[2], "a", buffering=1) if rank == 0 else None  # noqa: SIM115
step, last = 0, time.time()
while True:
    optimizer.zero_grad()
    loss = ((model(inputs) - targets) ** 2).mean()
    loss.backward()
    optimizer.step()
    step += 1
    now = time.time()
    if log is not None and truth is not None:
        log.write(f"{now:.6f} step={step}\n")
        truth.write(f"{step} {now:.6f} {now - last:.6f}\n")
    last = now
