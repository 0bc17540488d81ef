"""Stage 7b, several processes: training on ``torch.distributed`` with the engines PyTorch ships, DDP or FSDP2,
started by PyTorch's own launcher.

``tfspec train ... --nproc N`` runs ``torch.distributed.run`` (torchrun), which starts N workers of the same
command; ``torchrun --nproc-per-node N -m tfspec train ...`` does the same by hand. A worker finds its place in
the environment torchrun sets (``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``) and joins the process group: gloo on
CPU, nccl on CUDA, one GPU a worker (``cuda:LOCAL_RANK``).

Every worker draws the whole global batch (``--batch`` rows a worker, so ``--batch × N`` in all; batches are a
function of seed and step) and trains on its own rows; the loss is the sum over the global batch's labelled
tokens divided by their count, so N workers × batch b compute what one worker × batch N·b computes. ``ddp``
(default) wraps the model in ``DistributedDataParallel``; ``fsdp`` shards every layer, then the rest, with
FSDP2's ``fully_shard`` on a one-dimensional device mesh. Checkpoints hold the full weights and the optimizer
state keyed as a single process keys it, gathered to rank 0, so a run resumes on any number of workers.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

STRATEGIES = ("ddp", "fsdp")


@dataclass(frozen=True)
class World:
    """This process's place among a run's workers (rank 0 of 1 when the run is not distributed)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    strategy: str = "ddp"

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def main(self) -> bool:
        """Whether this worker writes: metrics, progress, plots and checkpoints come from rank 0."""
        return self.rank == 0

    def device(self, name: str) -> torch.device:
        """The device ``--device`` names, for this worker: CUDA workers take one GPU each."""
        device = torch.device(name)
        if device.type == "cuda" and self.distributed and device.index is None:
            return torch.device("cuda", self.local_rank)
        return device

    def rows(self, total: int) -> slice:
        """This worker's rows of a global batch of ``total``."""
        share = total // self.size
        return slice(self.rank * share, (self.rank + 1) * share)


def launched() -> bool:
    """Whether this process is a worker that torchrun started."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


def join(strategy: str, device_name: str) -> World:
    """The world torchrun set up, joined (a process group, when there is more than one worker)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"--strategy {strategy}: one of {', '.join(STRATEGIES)}")
    if not launched():
        return World(strategy=strategy)
    world = World(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)),
                  strategy)
    if world.distributed and not dist.is_initialized():
        cuda = torch.device(device_name).type == "cuda"
        if cuda:
            torch.cuda.set_device(world.device(device_name))
        dist.init_process_group("nccl" if cuda else "gloo")
    return world


def lost_worker(exc: BaseException) -> str | None:
    """Why a collective failed, when the cause is another worker gone (killed, or failed on its own): the
    backend's first line; None for any other error."""
    message = str(exc)
    if isinstance(exc, dist.DistError) or (isinstance(exc, RuntimeError) and any(
            word in message for word in ("gloo", "NCCL", "Connection reset", "Connection closed"))):
        reason = message.splitlines()[0] if message else type(exc).__name__
        return reason.split("] ", 1)[-1].split(". ")[0]  # without gloo's source location and advice
    return None


def leave(world: World, status: int) -> int:
    """End a worker together with the others once the run is done and saved, with exit status ``status``; in
    one process, just return it. A worker that tears its connections down while another still writes makes gloo
    abort, so all wait at a barrier first; and then each ends at once, without Python's teardown, in which gloo's
    threads could still abort the process ("terminate called without an active exception", after a run that
    went well, now and then in the tests here). (A worker that fails just exits: torchrun then stops
    the others, where a barrier would wait for them forever.)"""
    if not (world.distributed and dist.is_initialized()):
        return status
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _parameters_without_gradients(model, inputs: dict) -> bool:
    """Whether a backward pass leaves some parameter without a gradient (a pooler whose output takes no part
    in the loss): DDP must then look for unused parameters."""
    was_training = model.training
    model.eval()
    out = model(**inputs)
    out = out[0] if isinstance(out, tuple) else out
    out.float().sum().backward()
    unused = any(p.grad is None for p in model.parameters() if p.requires_grad)
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    return unused


def wrap(model, world: World, sample: dict):
    """``model`` as this world trains it: itself, in DDP, or sharded with FSDP2 (``sample``: inputs of one row,
    to find parameters a backward pass leaves out)."""
    if not world.distributed:
        return model
    device = next(model.parameters()).device
    if world.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                       find_unused_parameters=_parameters_without_gradients(model, sample))
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from ..nn.model import Stack

    mesh = init_device_mesh(device.type, (world.size,))
    for stack in [m for m in model.modules() if isinstance(m, Stack)]:
        for layer in stack.layers:  # a layer's weights are gathered for its forward and backward only
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)  # embeddings, head and final norms: the rest
    return model


def unwrap(model):
    """The module that computes (DDP keeps it in ``.module``; FSDP2 shards it in place)."""
    return getattr(model, "module", model) if type(model).__name__ == "DistributedDataParallel" else model


@contextmanager
def gradients_synced(model, world: World, sync: bool):
    """Gradient accumulation: only the last micro-batch of a step all-reduces (or reduce-scatters) them."""
    if not world.distributed or sync:
        yield
    elif world.strategy == "ddp":
        with model.no_sync():
            yield
    else:
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)


def all_sum(values: list[float], world: World) -> list[float]:
    """``values`` summed over the workers (every worker calls it; float64)."""
    if not world.distributed:
        return values
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def gathered(value, world: World) -> list:
    """``value`` of every worker, in rank order (every worker calls it)."""
    if not world.distributed:
        return [value]
    values = [None] * world.size
    dist.all_gather_object(values, value)
    return values


def broadcast(value, world: World):
    """Rank 0's ``value``, on every worker."""
    if not world.distributed:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def full_state(model, optimizer, world: World) -> tuple[dict, dict]:
    """(weights, optimizer state) as one process holds them: full tensors on the CPU, the optimizer keyed by
    parameter index. Every worker calls it (FSDP2 gathers); rank 0's is complete, the others may be empty."""
    if world.distributed and world.strategy == "fsdp":
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                             get_optimizer_state_dict)

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = get_model_state_dict(model, options=options)
        by_name = get_optimizer_state_dict(model, optimizer, options=options)
        return weights, _by_index(by_name) if world.main else {}
    return unwrap(model).state_dict(), optimizer.state_dict()


def load_optimizer_state(model, optimizer, state: dict, world: World) -> None:
    """Load a single process's optimizer state (keyed by parameter index) into this world's optimizer."""
    if not (world.distributed and world.strategy == "fsdp"):
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = {id(p): name for name, p in model.named_parameters()}
    order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    by_name = {"state": {order[int(i)]: s for i, s in state["state"].items()},
               "param_groups": [{**group, "params": [order[int(i)] for i in group["params"]]}
                                for group in state["param_groups"]]}
    set_optimizer_state_dict(model, optimizer, by_name, options=StateDictOptions(full_state_dict=True))


def _by_index(by_name: dict) -> dict:
    """A full optimizer state keyed by parameter name, keyed by index as ``Optimizer.state_dict`` keys it."""
    order = [name for group in by_name["param_groups"] for name in group["params"]]
    index = {name: i for i, name in enumerate(order)}
    return {"state": {index[name]: s for name, s in by_name["state"].items()},
            "param_groups": [{**group, "params": [index[n] for n in group["params"]]}
                             for group in by_name["param_groups"]]}


# ---------------------------------------------------------------- the launcher
def root_failure(failures: dict):
    """(rank, failure) of the worker whose failure stopped the run: one that failed by itself, not one torchrun
    then stopped with SIGTERM, nor one that aborted (SIGABRT) tearing down after it found a peer gone -- when
    both are seen at one poll, their timestamps do not tell them apart; then the earliest, then the lowest rank."""
    return min(failures.items(), key=lambda item: (item[1].exitcode == -15, item[1].exitcode == -6,
                                                   item[1].timestamp, item[0]))


def launch(argv: list[str], nproc: int) -> int:
    """Run ``tfspec`` with ``argv`` in ``nproc`` workers through torchrun on this machine; the exit status is
    0, or the first failed worker's, after a line naming its rank and reason."""
    import logging

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    threads = max((os.cpu_count() or 1) // nproc, 1)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # torchrun would set 1, with a warning
    for name in ("torch.distributed.elastic", "torch.distributed.elastic.agent.server.api"):
        logging.getLogger(name).setLevel(logging.CRITICAL)  # the lines below say it once
    args = get_args_parser().parse_args(["--standalone", "--nproc-per-node", str(nproc), "--max-restarts", "0",
                                         "--module", "tfspec.cli", *argv])
    try:
        run(args)
    except ChildFailedError as exc:
        rank, failure = root_failure(exc.failures)
        how = (f"was killed by {failure.signal_name()}" if failure.exitcode < 0
               else f"exited with status {failure.exitcode} (its error is above)")
        print(f"tfspec {argv[0]}: error: worker rank {rank} of {nproc} {how}; the run stopped", file=sys.stderr,
              flush=True)
        return failure.exitcode if failure.exitcode > 0 else 1
    except SignalException as exc:  # the launcher itself was told to stop (SIGTERM, SIGHUP): so were its workers
        print(f"tfspec {argv[0]}: stopped by {exc.sigval.name}; the workers were stopped with it, and the run "
              "resumes from its last checkpoint", file=sys.stderr, flush=True)
        return 128 + int(exc.sigval)
    return 0
