"""Inherited weights and PBT for command objectives: a real script (no Atoll import) that a bred
child starts from its parent's kept files, under a real search on 1-rank (GA, in-process) and
2-rank workers (PBT, mpirun), with the lineage read back from the HDF5 record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from atoll.individual import NO_EPOCH, NO_PARENT, Status
from atoll.record import RunPaths, open_run
from conftest import ROOT, atoll_cmd, mpirun_atoll, run

COMMANDS = ROOT / "tests" / "commands"

CONFIG = f"""seed = 11
[objective]
command = ["{{python}}", "{COMMANDS}/inheriting.py", "--x", "{{x}}", "--out", "{{work_dir}}"]
[space.x]
type = "float"
low = 0.0
high = 1.0
[search]
islands = 1
[migration]
probability = 0.0
"""


def search(tmp_path: Path, settings: list[str], ranks: int = 0, config_text: str = CONFIG
           ) -> RunPaths:
    """A finished search of ``config_text`` with ``settings``: in-process, or under mpirun."""
    config = tmp_path / "atoll.toml"
    config.write_text(config_text)
    args = ["search", "--config", str(config), "--run-dir", str(tmp_path / "run"), "-q"]
    for item in settings:
        args += ["--set", item]
    done = mpirun_atoll(ranks, *args, timeout=240) if ranks else run(atoll_cmd(*args))
    assert done.returncode == 0, done.stderr[-3000:]
    return RunPaths(tmp_path / "run")


def loaded(paths: RunPaths, ident: int, rank: int) -> dict[str, Any]:
    return json.loads(paths.work_dir(ident).joinpath(f"loaded-rank{rank}.json").read_text())


def check_lineage(paths: RunPaths, ranks: int) -> int:
    """Every child the record says inherited started its script, on each rank, from its
    parent's state as the parent ended, was told so, and trained on from the next epoch; the
    others started from scratch, told nothing. Returns how many inherited."""
    run = open_run(paths.run_dir)
    ind = run.individuals
    assert (ind["status"] == int(Status.OK)).all(), ind["error"]
    inherited = 0
    for row in ind:
        ident, parent, epoch = int(row["id"]), int(row["inherit_from"]), int(row["inherit_epoch"])
        final = json.loads(paths.work_dir(ident).joinpath("final.json").read_text())
        assert row["loss"] == pytest.approx(final["w"])
        curve = run.epochs[run.epochs["individual"] == ident]["epoch"].tolist()
        if parent == NO_PARENT:
            assert epoch == NO_EPOCH and curve == [0, 1], row
            for rank in range(ranks):
                assert loaded(paths, ident, rank) == {
                    "resume": "", "inherit_from": "", "inherit_epoch": "",
                    "state": {"epoch": -1, "w": 0.0, "trained_by": []}}
            continue
        inherited += 1
        given = json.loads(paths.work_dir(parent).joinpath("final.json").read_text())
        assert epoch == given["epoch"] and curve == [epoch + 1, epoch + 2], row
        for rank in range(ranks):
            assert loaded(paths, ident, rank) == {
                "resume": str(paths.inherited_dir(ident)), "inherit_from": str(parent),
                "inherit_epoch": str(epoch), "state": given}
        assert final["trained_by"] == [*given["trained_by"], *[f"ind{ident:012d}"] * 2]
    for ident in ind["id"].tolist():  # a kept parent's files are as it left them
        kept = paths.command_checkpoint_dir(int(ident)) / "state.json"
        if kept.exists():
            assert kept.read_text() == \
                paths.work_dir(int(ident)).joinpath("final.json").read_text()
        assert not paths.inherited_dir(int(ident)).exists()
    return inherited


def test_ga_children_start_their_script_from_their_better_parents_files(tmp_path):
    paths = search(tmp_path, ["search.evaluations=10", "evolution.strategy=ga",
                              "evolution.population_size=3", "evolution.random_init=0",
                              "inherit.enabled=true", "inherit.keep=3"])
    assert check_lineage(paths, ranks=1) >= 3


def test_pbt_on_two_rank_workers_trains_members_on_from_their_files(tmp_path):
    paths = search(tmp_path, ["search.evaluations=14", "search.ranks_per_worker=2",
                              "evolution.strategy=pbt", "evolution.population_size=3",
                              "pbt.fraction=0.5", "distributed.timeout=20"], ranks=4)
    assert check_lineage(paths, ranks=2) >= 4
    ind = open_run(paths.run_dir).individuals
    copies = ind[(ind["parent_b"] >= 0) & (ind["inherit_from"] >= 0)]
    assert len(copies) >= 1, ind[["id", "parent_a", "parent_b", "inherit_from"]]
    for row in copies:  # a copy of a top member started from that member's files
        assert row["inherit_from"] == row["parent_a"]


def test_a_child_whose_parents_files_are_gone_starts_from_scratch_with_no_lineage(tmp_path):
    """The scripts empty their checkpoint directories as they end: a parent's small Atoll
    checkpoint is kept, its files are not; its children are told nothing to resume, a warning
    says why, and the record shows no inheritance."""
    paths = search(tmp_path, ["search.evaluations=6", "evolution.strategy=ga",
                              "evolution.population_size=2", "evolution.random_init=0",
                              "inherit.enabled=true"],
                   config_text=CONFIG.replace('"{work_dir}"]', '"{work_dir}", "--forget"]'))
    assert check_lineage(paths, ranks=1) == 0
    log = paths.log_file(0, 0).read_text()
    assert "not inheriting individual" in log and "is empty or gone" in log, log[-2000:]
    assert "inherit.shape_params" not in log  # a script cannot say its shapes differ
