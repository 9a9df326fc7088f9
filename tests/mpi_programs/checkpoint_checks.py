"""Checkpoints of a 2-rank DDP worker, for tests/test_checkpoint_workers.py (mpirun -n 2).

    mpirun -n 2 python tests/mpi_programs/checkpoint_checks.py OUT.json BASE_DIR SMALL_DISK

Both ranks form one worker with real ``WorkerServices`` (gloo process group, a checkpoint store
per run directory under BASE_DIR) and real Contexts. Every rank collects what it saw; rank 0
writes all of it to OUT.json and the test asserts.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from examples.ddp_user_objective import train_mlp
from mpi4py import MPI

from atoll.engine.topology import NodePlace
from atoll.errors import ObjectiveError
from atoll.evaluation.context import Context, WorkerServices
from atoll.evaluation.process_group import ProcessGroupOwner
from atoll.objectives import classifier
from atoll.record import RunPaths, full
from atoll.record.checkpoints import CheckpointStore

PARAMS = {"conv_layers": 2, "activation": "tanh", "lr": 0.5, "gamma": 0.9}
COMM = MPI.COMM_WORLD
GROUP = ProcessGroupOwner(COMM, "gloo", 60.0, NodePlace(COMM.Get_rank()))
SHORT = ProcessGroupOwner(COMM, "gloo", 2.0, NodePlace(COMM.Get_rank()))
"""distributed.timeout = 2 s for the calls on some ranks only (its group is never made)."""


class Probe(Context):
    """A Context that keeps the offered weights and the reported curve on every rank (the
    real one: the leader's only)."""

    kept: dict[str, torch.Tensor] = {}
    curve: list[dict[str, Any]] | None = None

    def keep_weights(self, state_dict: Any, loss: float) -> None:
        self.kept = dict(state_dict)

    def report(self, epoch: int, **metrics: float) -> bool:
        if self.curve is not None:
            self.curve.append({"epoch": epoch, **{k: float(v) for k, v in metrics.items()}})
        return super().report(epoch, **metrics)


def make_ctx(run_dir: Path, run_id: str, ind_id: int, epochs: int,
             curve: list[dict[str, Any]] | None = None,
             group: ProcessGroupOwner = GROUP) -> Probe:
    services = WorkerServices(comm=COMM, group=group, seed=3, node=NodePlace(COMM.Get_rank()),
                              options={"epochs": epochs, "batch_size": 32, "patience": 9},
                              checkpoints=CheckpointStore(RunPaths(run_dir), run_id))
    probe = Probe(services, ind_id)
    probe.curve = curve
    return probe


def checksum(state: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for key, tensor in state.items():
        digest.update(key.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def train(run_dir: Path, epochs: int) -> dict[str, Any]:
    curve: list[dict[str, Any]] = []
    ctx = make_ctx(run_dir, "run", 7, epochs, curve)
    loss = classifier.train(PARAMS, ctx)
    return {"loss": loss, "kept": checksum(ctx.kept),
            "curve": [{k: e[k] for k in ("epoch", "train_loss", "val_loss", "lr")}
                      for e in curve]}


def continuation(base: Path) -> dict[str, Any]:
    """One evaluation of 3 epochs, and the same one stopped after 2 and continued; the same
    for the user example (examples/ddp_user_objective.py)."""
    whole = train(base / "whole", 3)
    first = train(base / "parts", 2)
    rest = train(base / "parts", 3)
    example = {}
    for name, run_dir, epochs in (("whole", "ex-whole", 3), ("first", "ex-parts", 2),
                                  ("rest", "ex-parts", 3)):
        curve: list[dict[str, Any]] = []
        ctx = make_ctx(base / run_dir, "run", 8, epochs, curve)
        loss = float(train_mlp({"hidden": 16, "lr": 0.05}, ctx))
        example[name] = {"loss": loss, "kept": checksum(ctx.kept), "curve": curve}
    return {"whole": whole, "first": first, "rest": rest, "example": example}


def attempt(action: Any) -> dict[str, Any]:
    """What a checkpoint call did on this rank: its value or error, and how long it took."""
    started = time.monotonic()
    try:
        value, error = action(), ""
    except ObjectiveError as exc:
        value, error = None, str(exc)
    return {"value": value, "error": error, "seconds": time.monotonic() - started}


def ended(ctx: Context) -> None:
    """The end of an evaluation on this rank, as the evaluator ends one (every rank meets)."""
    assert ctx._services.meeting is not None
    ctx._services.meeting.end()


def misuse(base: Path) -> dict[str, Any]:
    """Calls on some ranks only, then different epochs, then proper calls."""
    rank, facts = COMM.Get_rank(), {}
    run_dir = base / "misuse"
    # The contexts on every rank (their services are made collectively), the calls on one.
    alone = [make_ctx(run_dir, "run", ident, 1, group=SHORT) for ident in (50, 51)]
    if rank == 0:
        facts["leader_only_save"] = attempt(lambda: alone[0].save_checkpoint({"w": 1}, 0))
    COMM.Barrier()  # rank 1 trains meanwhile (in the torch collectives of its epoch)
    # then every rank: the next call works (the DDP habit of saving on rank 0 only, caught)
    facts["then_every_rank"] = attempt(lambda: alone[0].save_checkpoint({"w": 2}, 1))
    then_loaded = alone[0].load_checkpoint()
    facts["then_loaded"] = None if then_loaded is None else then_loaded.epoch
    ended(alone[0])
    if rank == 1:
        facts["follower_only_load"] = attempt(lambda: alone[1].load_checkpoint())
    ended(alone[1])  # the leader's end of the evaluation answers the follower's lone call
    ctx = make_ctx(run_dir, "run", 52, 1, group=SHORT)
    facts["different_epochs"] = attempt(lambda: ctx.save_checkpoint({"w": 1}, 1 + rank))
    ended(ctx)
    facts["unstorable"] = attempt(lambda: make_ctx(run_dir, "run", 54, 1)
                                  .save_checkpoint({"opt": {1, 2}}, 0))
    state = {"w": torch.full((4,), float(rank)), "rank": rank}
    facts["proper_save"] = attempt(lambda: make_ctx(run_dir, "run", 53, 1)
                                   .save_checkpoint(state, 5))
    loaded = make_ctx(run_dir, "run", 53, 1).load_checkpoint()
    facts["proper_load"] = None if loaded is None else \
        {"epoch": loaded.epoch, "rank": loaded.state["rank"], "w": loaded.state["w"].tolist()}
    return facts


def refused(base: Path) -> dict[str, Any]:
    """A damaged checkpoint and a foreign one: both ranks start from scratch."""
    damaged = base / "parts"  # what continuation() left: individual 7 at epoch 2
    if COMM.Get_rank() == 0:
        path = RunPaths(damaged).checkpoint_file(7)
        data = bytearray(path.read_bytes())
        data[-20] ^= 0xFF
        path.write_bytes(bytes(data))
        CheckpointStore(RunPaths(base / "foreign"), "another-run").save(7, 1, {"w": 1})
    COMM.Barrier()
    return {"damaged": make_ctx(damaged, "run", 7, 3).load_checkpoint() is None,
            "foreign": make_ctx(base / "foreign", "run", 7, 3).load_checkpoint() is None}


def disk_full(disk: str) -> dict[str, Any] | None:
    """A save that meets a full disk (``disk``: a small file system, or "" for none)."""
    if not disk:
        return None
    small = make_ctx(Path(disk), "run", 9, 1).save_checkpoint({"w": torch.zeros(20_000)}, 0)
    big = make_ctx(Path(disk), "run", 9, 1).save_checkpoint({"w": torch.ones(400_000)}, 1)
    loaded = make_ctx(Path(disk), "run", 9, 1).load_checkpoint()
    return {"small": small, "big": big, "reported": full.seen(),
            "kept": None if loaded is None else [loaded.epoch, float(loaded.state["w"].sum())]}


def main() -> None:
    out, base, disk = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    facts = {"rank": COMM.Get_rank(), **continuation(base), "misuse": misuse(base),
             "refused": refused(base), "disk_full": disk_full(disk)}
    GROUP.close()
    gathered = COMM.gather(facts, root=0)
    if COMM.Get_rank() == 0:
        Path(out).write_text(json.dumps(gathered))


if __name__ == "__main__":
    main()
