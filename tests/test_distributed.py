"""Worker process groups under a real mpirun: made once per worker, stores on loopback only."""

from __future__ import annotations

import numpy as np

from atoll.record import open_run
from conftest import mpirun_atoll


def test_one_group_per_worker_and_its_store_listens_on_loopback_only(tmp_path):
    run_dir = tmp_path / "run"
    done = mpirun_atoll(
        4, "search", "--config", "tests/configs/slow_sphere.toml", "--run-dir", str(run_dir),
        "--set", "objective.name=objectives:store_address", "--set", "search.generations=4",
        "--set", "search.ranks_per_worker=2", "--set", "distributed.backend=gloo")
    assert done.returncode == 0, done.stderr[-3000:]
    run = open_run(run_dir)
    epochs, ind = run.epochs, run.individuals
    assert len(epochs) == 8 and (epochs["loopback"] == 1.0).all()
    worker_of = dict(zip(ind["id"].tolist(), ind["worker"].tolist(), strict=True))
    for worker in (0, 1):
        mine = epochs[[worker_of[i] == worker for i in epochs["individual"].tolist()]]
        assert len(mine) >= 2  # 4 each, unless one passed part of its share to the other
        assert len(np.unique(mine["group"])) == 1  # the same group for all its individuals
        assert len(np.unique(mine["store_port"])) == 1
    # The two workers rendezvous on different ports the OS picked.
    assert len(np.unique(epochs["store_port"])) == 2


def test_a_gpu_becomes_the_current_device_and_a_cpu_run_touches_no_cuda(monkeypatch):
    """No GPU here: what the NCCL path asks of torch is recorded, not run (README says so)."""
    import torch

    from atoll.evaluation.process_group import bind_device

    asked: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "set_device", asked.append)
    bind_device(torch.device("cpu"))
    assert asked == []
    bind_device(torch.device("cuda", 3))
    assert asked == [torch.device("cuda", 3)]


def test_nccl_errors_raise_in_the_waiting_call_unless_the_user_chose_otherwise():
    """Torch's default NCCL error handling ends the process on a timed-out collective (the
    partner of a rank whose objective raised): clean-up only lets it raise instead."""
    from atoll.evaluation.process_group import keep_rank_alive_on_nccl_errors

    environ: dict[str, str] = {}
    keep_rank_alive_on_nccl_errors(environ)
    assert environ == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2"}
    environ = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    keep_rank_alive_on_nccl_errors(environ)
    assert environ == {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def test_a_store_across_hosts_listens_on_the_address_that_reaches_them():
    """The route to the peer picks the address (not this host's name, which images often map to
    127.0.1.1); a peer whose name does not resolve falls back to that name's address."""
    import socket

    from atoll.evaluation.process_group import address_towards

    assert address_towards("localhost") == "127.0.0.1"
    assert address_towards("no-such-host.invalid") == socket.gethostbyname(socket.gethostname())


def test_a_rank_takes_its_node_ranks_gpu_of_a_shared_list_and_the_first_of_its_own(
        monkeypatch):
    """No GPU here: torch's device count is given, the device only named."""
    import torch

    from atoll.engine.topology import NodePlace
    from atoll.evaluation.process_group import choose_device

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert choose_device("nccl", NodePlace(3, 4)) == torch.device("cuda", 1)
    assert choose_device("nccl", NodePlace(3, 4, same_gpus=False)) == torch.device("cuda", 0)
    assert choose_device("gloo", NodePlace(3, 4)) == torch.device("cpu")
