"""Facts about the classifier under real DDP, for tests/test_classifier.py (mpirun -n 4).

    mpirun -n 4 python tests/mpi_programs/ddp_checks.py OUT.json MNIST_ROOT STAGE_DIR WEIGHTS_DIR

COMM_WORLD is split into two workers of 2 ranks; each gets its ``WorkerServices`` (the one
factory of contexts the engine uses too) and a real ``Context`` per individual, so the real
process-group path runs (gloo).
Every rank collects what it saw; rank 0 writes all of it to OUT.json and the test asserts.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from mpi4py import MPI

from atoll.engine.topology import NodePlace
from atoll.errors import ObjectiveError
from atoll.evaluation.context import Context, WorkerServices
from atoll.evaluation.process_group import ProcessGroupOwner
from atoll.objectives import classifier, data
from atoll.record.models import save_state_dict

SEED = 5
PARAMS = [{"conv_layers": 2, "activation": "tanh", "lr": 0.01, "gamma": 0.9},
          {"conv_layers": 3, "activation": "relu", "lr": 0.005, "gamma": 0.7},
          {"conv_layers": 2, "activation": "sigmoid", "lr": 0.001, "gamma": 0.99}]
OPTIONS = {"epochs": 3, "batch_size": 16, "patience": 5}

INIT_CALLS = 0
_real_init = dist.init_process_group


def _counting_init(*args: Any, **kwargs: Any) -> Any:
    global INIT_CALLS
    INIT_CALLS += 1
    return _real_init(*args, **kwargs)


dist.init_process_group = _counting_init  # process_group.py looks it up at call time


class Probe(Context):
    """A Context that keeps the offered weights and the reported epochs on every rank (the
    real one: the leader's only)."""

    kept: tuple[dict[str, torch.Tensor], float] | None = None
    epochs: list[dict[str, Any]]

    def keep_weights(self, state_dict: Any, loss: float) -> None:
        self.kept = (dict(state_dict), loss)

    def report(self, epoch: int, **metrics: float) -> bool:
        self.epochs.append({"individual": self.individual_id, "epoch": epoch,
                            **{k: float(v) for k, v in metrics.items()}})
        return super().report(epoch, **metrics)


LOCAL_RANK = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()  # as topology does
GROUP: ProcessGroupOwner | None = None  # one owner per process, as in a job


def make_ctx(comm: MPI.Comm, ind_id: int, epochs: list[dict[str, Any]], options: dict[str, Any],
             data_dir: str | None = None) -> Probe:
    global GROUP
    if GROUP is None:
        GROUP = ProcessGroupOwner(comm, "gloo", 60.0, NodePlace(LOCAL_RANK))

    services = WorkerServices(comm=comm, group=GROUP, seed=SEED,
                              data_dir=Path(data_dir) if data_dir else None, options=options,
                              node=NodePlace(LOCAL_RANK))
    probe = Probe(services, ind_id)
    probe.epochs = epochs
    return probe


def checksum(state: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for key, tensor in state.items():
        digest.update(key.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def individuals(comm: MPI.Comm, worker: int, weights_dir: Path) -> dict[str, Any]:
    """Three individuals on one worker: replicas, metrics, whole-set evaluation, group reuse."""
    facts: dict[str, Any] = {"individuals": []}
    full = data.load_split("digits", None, "train")
    _, validation = data.train_validation(full, classifier.OPTIONS["val_fraction"])
    for n, params in enumerate(PARAMS):
        ind_id = 10 * worker + n
        epochs: list[dict[str, Any]] = []
        ctx = make_ctx(comm, ind_id, epochs, OPTIONS)
        loss = classifier.train(params, ctx)
        assert ctx.kept is not None
        state, kept_loss = ctx.kept
        model = classifier.build_model_from_params(params, full.shape, full.classes)
        model.load_state_dict(state)
        together = classifier.evaluate_whole_set(model, validation, ctx)
        alone = classifier.evaluate_whole_set(model, validation) if ctx.is_leader else None
        if ctx.is_leader:
            save_state_dict(weights_dir / f"ind{ind_id}.h5", state, {"loss": loss})
        facts["individuals"].append({
            "id": ind_id, "params": params, "loss": loss, "kept_loss": kept_loss,
            "checksum": checksum(state), "epochs": epochs, "together": together,
            "alone": alone, "group_id": id(GROUP.current) if GROUP else None,
            "init_calls": INIT_CALLS})
    return facts


def shards(comm: MPI.Comm) -> dict[str, Any]:
    """The positions each rank trains on (two epochs) and validates on."""
    full = data.load_split("digits", None, "train")
    training, validation = data.train_validation(full, 0.2)
    loader, sampler = data.train_loader(training, 16, comm.Get_rank(), comm.Get_size(), seed=3)
    epochs = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        positions = list(sampler)
        labels = torch.cat([y for _, y in loader]).tolist()
        epochs.append({"positions": positions,
                       "labels_match": labels == training[positions][1].tolist()})
    return {"train_len": len(training), "val_len": len(validation), "epochs": epochs,
            "train_rows": training.rows.tolist(), "val_rows": validation.rows.tolist(),
            "val_positions": data.shard_positions(len(validation), comm.Get_rank(),
                                                  comm.Get_size()).tolist()}


def mnist(comm: MPI.Comm, worker: int, root: str, stage_dir: str) -> dict[str, Any]:
    """Worker 0 trains on tiny MNIST files (staged); worker 1 names a missing directory."""
    epochs: list[dict[str, Any]] = []
    options = {"dataset": "mnist", "epochs": 2, "batch_size": 8, "stage_dir": stage_dir}
    where = root if worker == 0 else str(Path(root) / "missing")
    ctx = make_ctx(comm, 100 + worker, epochs, options, where)
    try:
        loss: float | None = classifier.train(PARAMS[0], ctx)
        error = ""
    except ObjectiveError as exc:
        loss, error = None, str(exc)
    shape = data.load_split("mnist", root, "train").shape if worker == 0 else None
    return {"loss": loss, "error": error, "epochs": len(epochs), "shape": shape,
            "staged": sorted(str(p.relative_to(stage_dir)) for p in Path(stage_dir).rglob("*")
                             if p.is_file())}


def main() -> None:
    out, mnist_root, stage_dir, weights_dir = sys.argv[1:5]
    world = MPI.COMM_WORLD
    worker = world.Get_rank() // 2
    comm = world.Split(color=worker, key=world.Get_rank())
    facts = {"world_rank": world.Get_rank(), "worker": worker, "rank": comm.Get_rank(),
             **individuals(comm, worker, Path(weights_dir)),
             "shards": shards(comm), "mnist": mnist(comm, worker, mnist_root, stage_dir),
             "final_init_calls": INIT_CALLS}
    if GROUP is not None:
        GROUP.close()
    gathered = world.gather(facts, root=0)
    if world.Get_rank() == 0:
        Path(out).write_text(json.dumps(gathered))


if __name__ == "__main__":
    main()
