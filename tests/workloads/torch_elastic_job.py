"""A real PyTorch elastic training job for the workload tests: DDP on gloo (CPU), a
``torch.distributed.checkpoint`` (DCP) save every ``--every`` steps, run under torchrun.

Run as ``torchrun --nproc-per-node 2 --max-restarts 1 torch_elastic_job.py --dir D``.
Each worker group attempt joins its own key prefix of the rendezvous store (a group
re-forming over gloo can hang on keys an earlier attempt left). Rank 0 writes, for the
verifier, ``D/train.log`` (``<unix time> step <N>`` per step done, ``<unix time>
resumed from <N>`` after loading) and, as ground truth, ``D/truth.jsonl`` (one
``{"attempt", "event", "step", "t"}`` object per step and resume, flushed each time).
With ``--metrics-port``, rank 0 also serves Prometheus metrics (``train_step``,
``train_resumed_from_step``, and prometheus_client's ``process_start_time_seconds``)
from before it loads its checkpoint, as many jobs do: for ``--load-delay-s`` after a
restart it shows step 0.
"""

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from prometheus_client import Gauge, start_http_server
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument("--metrics-port", type=int, default=0)
    parser.add_argument("--load-delay-s", type=float, default=0.0)
    args = parser.parse_args()
    root = Path(args.dir)
    store_dir = root / "checkpoints"
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                         world_size=world, is_master=rank == 0 and not agent_store,
                         wait_for_workers=False)
    store = dist.PrefixStore(f"attempt-{attempt}/", base)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    complete = sorted((int(p.name.split("_")[1]), p) for p in store_dir.glob("step_*")
                      if (p / ".metadata").exists()) if store_dir.exists() else []
    step = 0
    log = truth = None
    step_gauge = resumed_gauge = None
    if rank == 0:
        log = (root / "train.log").open("a", buffering=1)
        truth = (root / "truth.jsonl").open("a", buffering=1)
        if args.metrics_port:
            step_gauge = Gauge("train_step", "steps done")
            resumed_gauge = Gauge("train_resumed_from_step", "the step this attempt loaded")
            start_http_server(args.metrics_port, addr="127.0.0.1")
    if complete:
        time.sleep(args.load_delay_s)
        step, path = complete[-1]
        state = {"model": model.state_dict()}
        dcp.load(state, checkpoint_id=str(path))
        model.load_state_dict(state["model"])
    if resumed_gauge is not None and step_gauge is not None:
        resumed_gauge.set(step)
        step_gauge.set(step)
    if log is not None and truth is not None:
        now = time.time()
        log.write(f"{now:.6f} resumed from {step}\n")
        truth.write(json.dumps({"attempt": attempt, "event": "resumed", "step": step,
                                "t": now}) + "\n")
    while step < args.steps:
        inputs = torch.randn(16, 8)
        loss = model(inputs).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step_gauge is not None:
            step_gauge.set(step)
        if log is not None and truth is not None:
            now = time.time()
            log.write(f"{now:.6f} step {step}\n")
            truth.write(json.dumps({"attempt": attempt, "event": "step", "step": step,
                                    "t": now}) + "\n")
        if step % args.every == 0:
            dcp.save({"model": model.state_dict()}, checkpoint_id=str(store_dir / f"step_{step}"))
        time.sleep(args.step_s)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
