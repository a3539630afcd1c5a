"""A tiny data-parallel training script for `launcher = "torchrun"` (studies/ddp-regression.toml).

torchrun starts one copy per GPU of the trial's slot (TUNE_NPROC of them); each copy is a rank.
They train one linear model with DistributedDataParallel, each on its own shard of a synthetic
regression set: NCCL on GPUs, gloo on the CPU. Every rank computes the validation loss (averaged
over the ranks with all_reduce), but only rank 0 reports it: tune reads rank 0's `tune:` lines
only, and keeps the other ranks' output in the trial's `ranks/` directory.

Each rank writes its process id to `rank-<R>.pid` in the trial's directory (TUNE_TRIAL_DIR), so
that a test can check that no rank outlives a stopped trial. For tests too: `--crash-rank R`
makes rank R fail after the first epoch, `--sleep S` makes every epoch S seconds longer.
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--crash-rank", type=int, default=-1)
    p.add_argument("--sleep", type=float, default=0.0)
    args = p.parse_args()

    trial_dir = os.environ.get("TUNE_TRIAL_DIR", ".")
    with open(os.path.join(trial_dir, f"rank-{os.environ.get('RANK', '0')}.pid"), "w") as f:
        f.write(str(os.getpid()))
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    print(f"rank {rank} of {world} on {device}", file=sys.stderr, flush=True)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 8, generator=g)
    w = torch.randn(8, 1, generator=g)
    y = x @ w + 0.1 * torch.randn(1024, 1, generator=g)
    train_x, train_y, val_x, val_y = x[:768], y[:768], x[768:], y[768:]
    # Each rank its own shard of the training set.
    shard_x, shard_y = train_x[rank::world].to(device), train_y[rank::world].to(device)

    torch.manual_seed(1)
    model = DistributedDataParallel(
        torch.nn.Linear(8, 1).to(device), device_ids=[local_rank] if cuda else None
    )
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        for i in range(0, len(shard_x), 32):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(shard_x[i : i + 32]), shard_y[i : i + 32])
            loss.backward()  # DDP averages the gradients over the ranks here
            opt.step()
        with torch.no_grad():
            val = torch.nn.functional.mse_loss(model(val_x.to(device)), val_y.to(device))
        dist.all_reduce(val)
        val = val.item() / world
        if rank == 0:
            print(f'tune: {{"step": {epoch}, "val_loss": {val}}}', flush=True)
        else:
            # Not a report: tune reads rank 0's lines only.
            print(f'tune: {{"step": {epoch}, "val_loss": 1000.0, "rank": {rank}}}', flush=True)
        if rank == args.crash_rank:
            raise RuntimeError(f"rank {rank} crashed on purpose after epoch {epoch}")
        time.sleep(args.sleep)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
