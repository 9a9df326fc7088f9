"""Bad input as users meet it, and a rank lost to a hard kill.

``CASES`` is the catalogue of bad input: each row says how the input is made, the command run on
it, and the exact line Atoll prints (``atoll: error: ...``). A row runs as a real subprocess
(``python -m atoll``, or ``mpirun`` for rank layouts), or, if the config parser alone refuses it,
through click's runner in this process (a few of those as processes too: ``END_TO_END``). It must
end with exit code 2 (mpirun: a non-zero code), that one line on stderr and nothing else (mpirun:
the line exactly once), no traceback, and the run directory exactly as it was: same files, same
bytes, nothing new; a run directory that did not exist is not created.

Placeholders in commands, TOML and messages: ``{tmp}`` (the test's tmp_path), ``{run_dir}``
(``{tmp}/run`` unless the setup moves it), ``{config}`` (``{tmp}/config.toml``, written from the
row's TOML), ``{root}`` (the checkout: the commands' working directory), and any a setup
adds. Rows marked xfail show what users should see but do not yet.

Read-only and full run directories need a file system that refuses writes: as root (whom file
permissions do not stop) a small tmpfs mounted read-only or filled up; as another user, chmod for
read-only, and "full" is skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from click.testing import CliRunner

from atoll.engine.restore import completed_count
from atoll.record import open_run
from conftest import (
    ROOT,
    alive,
    atoll_cmd,
    kill_tree,
    mpi_env,
    mpirun_atoll,
    mpirun_cmd,
    rank_pids,
    run,
)

SLOW_CONFIG = "tests/configs/slow_sphere.toml"
SEARCH = ("search", "--config", "{config}", "--run-dir", "{run_dir}")
SEARCH_SLOW = ("search", "--config", SLOW_CONFIG, "--run-dir", "{run_dir}",
               "--set", "search.generations=4")  # the settings of the base run below
RESUME = ("resume", "{run_dir}")
REPORT = ("report", "{run_dir}")
INSPECT = ("inspect", "{run_dir}")
AS_ROOT = os.geteuid() == 0


# -- making the input ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Setup:
    """What a setup function gets: where to work, a finished run to copy, and a cleanup stack."""

    tmp: Path
    run_dir: Path
    base: Path  # a finished run of SEARCH_SLOW (4 evaluations, one worker)
    stack: contextlib.ExitStack


Placeholders = dict[str, str] | None


def existing_run(s: Setup) -> Placeholders:
    shutil.copytree(s.base, s.run_dir)
    return None


def a_file(s: Setup) -> Placeholders:
    s.run_dir.write_text("not a directory\n")
    return None


def run_with_a_file_as(name: str) -> Callable[[Setup], Placeholders]:
    """An existing run whose folder ``name`` is a file (a slip of cp or rsync)."""
    def setup(s: Setup) -> Placeholders:
        shutil.copytree(s.base, s.run_dir)
        shutil.rmtree(s.run_dir / name, ignore_errors=True)
        (s.run_dir / name).write_text("not a directory\n")
        return None
    return setup


def results_as_a_directory(s: Setup) -> Placeholders:
    shutil.copytree(s.base, s.run_dir)
    (s.run_dir / "results.h5").unlink()
    (s.run_dir / "results.h5").mkdir()
    return None


def foreign_files(s: Setup) -> Placeholders:
    s.run_dir.mkdir()
    (s.run_dir / "notes.txt").write_text("precious\n")
    (s.run_dir / "data.csv").write_text("a,b\n1,2\n")
    return None


def truncated_run_file(s: Setup) -> Placeholders:
    existing_run(s)
    path = s.run_dir / "run.h5"
    data = path.read_bytes()
    path.write_bytes(data[:4096])
    return {"size": str(len(data))}


def garbage_worker_file(s: Setup) -> Placeholders:
    existing_run(s)
    (s.run_dir / "workers" / "job000-worker00000.h5").write_bytes(b"not hdf5 at all\n")
    return None


def garbage_results_file(s: Setup) -> Placeholders:
    existing_run(s)
    (s.run_dir / "results.h5").write_bytes(b"not hdf5 at all\n")
    return None


def garbage_results_file_alone(s: Setup) -> Placeholders:
    s.run_dir.mkdir()
    (s.run_dir / "results.h5").write_bytes(b"not hdf5 at all\n")
    return None


def newer_schema(s: Setup) -> Placeholders:
    existing_run(s)
    with h5py.File(s.run_dir / "run.h5", "r+") as f:
        f.attrs["schema_version"] = 99
    return None


def worker_of_another_space(s: Setup) -> Placeholders:
    existing_run(s)
    with h5py.File(s.run_dir / "workers" / "job000-worker00000.h5", "r+") as f:
        space = json.loads(f.attrs["space"])
        space["x1"]["high"] = 1.0
        f.attrs["space"] = json.dumps(space)
    return None


def _set_attr(path: Path, name: str, value: Any, table: str = "") -> None:
    with h5py.File(path, "r+") as f:
        (f[table] if table else f).attrs[name] = value


def worker_rows_negative(s: Setup) -> Placeholders:
    existing_run(s)
    _set_attr(s.run_dir / "workers" / "job000-worker00000.h5", "rows", -1, "individuals")
    return None


def jobs_rows_huge(s: Setup) -> Placeholders:
    existing_run(s)
    _set_attr(s.run_dir / "run.h5", "rows", 10**6, "jobs")
    return None


def budget_not_a_count(s: Setup) -> Placeholders:
    existing_run(s)
    _set_attr(s.run_dir / "run.h5", "budget", "lots")
    return None


def _edit_rows(path: Path, column: str, row: int, value: float, *, unsum: bool = False
               ) -> None:
    """Overwrite one committed value in place, as damage would (no check on the way in).
    ``unsum``: drop the rows' checksum too, as in a file written before checksums."""
    with h5py.File(path, "r+") as f:
        rows = f["individuals"][:]
        rows[column][row] = value
        f["individuals"][...] = rows
        if unsum:
            del f["individuals"].attrs["checksum"]


def edited_row(column: str, row: int, value: float, *, unsum: bool = False
               ) -> Callable[[Setup], Placeholders]:
    def setup(s: Setup) -> Placeholders:
        existing_run(s)
        _edit_rows(s.run_dir / "workers" / "job000-worker00000.h5", column, row, value,
                   unsum=unsum)
        return None

    return setup


status_out_of_enum = edited_row("status", 1, 7, unsum=True)
id_twice = edited_row("id", 2, 0, unsum=True)


def id_in_two_files(s: Setup) -> Placeholders:
    """A worker file copied to a later job's name: its ids twice in one run."""
    existing_run(s)
    shutil.copy(s.run_dir / "workers" / "job000-worker00000.h5",
                s.run_dir / "workers" / "job001-worker00000.h5")
    return None


def run_file_gone(s: Setup) -> Placeholders:
    existing_run(s)
    (s.run_dir / "run.h5").unlink()
    return None


def run_file_root_attributes_flipped(s: Setup) -> Placeholders:
    """8 bytes inverted where HDF5 keeps the names of run.h5's root attributes."""
    existing_run(s)
    path = s.run_dir / "run.h5"
    data = path.read_bytes()
    at = data.index(b"schema_version")
    path.write_bytes(data[:at] + bytes(b ^ 0xFF for b in data[at:at + 8]) + data[at + 8:])
    return None


def run_file_without_jobs(s: Setup) -> Placeholders:
    existing_run(s)
    with h5py.File(s.run_dir / "run.h5", "r+") as f:
        del f["jobs"]
    (s.run_dir / "results.h5").unlink()  # else inspect reads the run from it
    return None


def run_file_is(kind: str) -> Callable[[Setup], Placeholders]:
    def setup(s: Setup) -> Placeholders:
        existing_run(s)
        (s.run_dir / "run.h5").unlink()
        if kind == "directory":
            (s.run_dir / "run.h5").mkdir()
        else:
            os.mkfifo(s.run_dir / "run.h5")
        return None

    return setup


def worker_file_of_another_run(s: Setup) -> Placeholders:
    """A worker file of a real second run of the same search, copied in by hand."""
    existing_run(s)
    other = s.tmp / "other"
    done = run(atoll_cmd(*(fill(a, {"run_dir": str(other)}) for a in SEARCH_SLOW)), timeout=120)
    assert done.returncode == 0, done.stderr
    shutil.copy(other / "workers" / "job000-worker00000.h5",
                s.run_dir / "workers" / "job005-worker00000.h5")
    with h5py.File(s.run_dir / "run.h5", "r") as f:
        ours = f.attrs["run_id"]
    with h5py.File(other / "run.h5", "r") as f:
        theirs = f.attrs["run_id"]
    return {"ours": ours.decode(), "theirs": theirs.decode()}


def dangling_link(s: Setup) -> Placeholders:
    s.run_dir.symlink_to(s.tmp / "purged" / "run")
    return None


def broken_module(s: Setup) -> Placeholders:
    (s.tmp / "mods" / "broken_objective.py").write_text("RATE = 1 / 0\n")
    return None


def module(name: str, text: str) -> Callable[[Setup], Placeholders]:
    def setup(s: Setup) -> Placeholders:
        (s.tmp / "mods" / f"{name}.py").write_text(text)
        return None

    return setup


CHECKED = "def f(params, ctx):\n    return 0.0\n\n\n"


def empty_dir(name: str) -> Callable[[Setup], Placeholders]:
    def setup(s: Setup) -> Placeholders:
        (s.tmp / name).mkdir()
        return None

    return setup


def latin1_config(s: Setup) -> Placeholders:
    (s.tmp / "latin1.toml").write_bytes("# caf\xe9\nseed = 1\n".encode("latin-1"))
    return None


def _mount_tmpfs(s: Setup, where: Path, options: str) -> None:
    """Mount a tmpfs on ``where`` (root only) and unmount it when the test ends."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}), so no file system "
                    "refuses root's writes")

    def unmount() -> None:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)

    s.stack.callback(unmount)


def _read_only(s: Setup, where: Path) -> Placeholders:
    """Make ``where`` (already filled) refuse writes; {why} is the reason the OS gives."""
    if AS_ROOT:
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        return {"why": "Read-only file system"}
    def chmod_all(change: Callable[[int], int]) -> None:
        for path in [where, *where.rglob("*")]:
            path.chmod(change(path.stat().st_mode))

    chmod_all(lambda mode: mode & ~0o222)
    s.stack.callback(chmod_all, lambda mode: mode | 0o200)  # so that pytest can remove it
    return {"why": "Permission denied"}


def read_only_empty_dir(s: Setup) -> Placeholders:
    if AS_ROOT:
        _mount_tmpfs(s, s.run_dir, "size=1m")
    else:
        s.run_dir.mkdir()
    return _read_only(s, s.run_dir)


def read_only_run(s: Setup) -> Placeholders:
    if AS_ROOT:
        _mount_tmpfs(s, s.run_dir, "size=1m")
        shutil.copytree(s.base, s.run_dir, dirs_exist_ok=True)
    else:
        existing_run(s)
    return _read_only(s, s.run_dir)


def _full_disk(s: Setup, size: str, copy_run: bool) -> Placeholders:
    """A tmpfs of ``size`` holding a filler file that leaves 4 KiB; the run in {tmp}/disk/run."""
    if not AS_ROOT:
        pytest.skip("a full file system needs root to mount a small tmpfs")
    disk = s.tmp / "disk"
    _mount_tmpfs(s, disk, f"size={size}")
    run_dir = disk / "run"
    if copy_run:
        shutil.copytree(s.base, run_dir)
    free = shutil.disk_usage(disk).free
    with open(disk / "filler", "wb") as f:
        f.truncate(0)
        os.posix_fallocate(f.fileno(), 0, free - 4096)
    return {"run_dir": str(run_dir)}


def full_disk(s: Setup) -> Placeholders:
    return _full_disk(s, "64k", copy_run=False)


def full_disk_with_a_run(s: Setup) -> Placeholders:
    return _full_disk(s, "1m", copy_run=True)


# -- the catalogue ------------------------------------------------------------------------------

SPACE = '\n[space.x]\ntype = "float"\nlow = 0.0\nhigh = 1.0\n'
MNIST = """
[objective]
name = "atoll.objectives.classifier:train"
data_dir = "{tmp}/DATA"
[objective.options]
dataset = "mnist"
epochs = 1
[space.conv_layers]
type = "int"
low = 1
high = 2
[space.activation]
type = "categorical"
choices = ["relu", "tanh"]
[space.lr]
type = "float"
low = 1e-3
high = 1e-1
log = true
[space.gamma]
type = "float"
low = 0.5
high = 0.9
[search]
generations = 1
"""
STAGE = "download it on a login node with torchvision.datasets.MNIST('{tmp}/{data}', " \
    "download=True) (Atoll never downloads)"

END_TO_END = {"toml_syntax_error", "unknown_key_in_section", "reversed_float_range",
              "config_file_missing", "bad_override"}
"""Config rows that still run as real ``python -m atoll`` processes, one of each kind."""


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]  # after "atoll"
    expected: str  # the whole stderr line
    toml: str | None = None  # written to {config}
    setup: Callable[[Setup], Placeholders] | None = None
    ranks: int = 0  # 0: one plain process; n: under mpirun -n n
    marks: tuple[Any, ...] = ()

    @property
    def in_process(self) -> bool:
        """A row the config parser refuses before any objective, record or MPI is touched:
        it runs through click's runner in the test's process (a process start saved per
        row), except the END_TO_END ones."""
        return (self.argv[0] == "search" and not self.ranks and self.setup is None
                and "[objective]" not in (self.toml or "") and self.id not in END_TO_END)


CASES = [
    # TOML and keys
    Case("toml_syntax_error", SEARCH,
         "atoll: error: {config}: invalid TOML: Invalid value (at line 3, column 15)",
         toml="seed = 1\n[search]\ngenerations = = 3\n"),
    Case("unknown_top_level_key", SEARCH,
         "atoll: error: sed: unknown key; did you mean 'seed'?", toml="sed = 1\n"),
    Case("unknown_section", SEARCH,
         "atoll: error: serch: unknown key; did you mean 'search'?",
         toml="[serch]\ngenerations = 3\n"),
    Case("unknown_key_in_section", SEARCH,
         "atoll: error: search.islnds: unknown key; did you mean 'islands'?",
         toml="[search]\nislnds = 2\n"),
    Case("unknown_key_in_parameter", SEARCH,
         "atoll: error: space.x.logg: unknown key for a float parameter; did you mean 'log'?",
         toml=SPACE + "logg = true\n"),
    Case("misspelt_required_key_of_parameter", SEARCH,
         "atoll: error: space.x.hihg: unknown key for a float parameter; did you mean 'high'?",
         toml='[space.x]\ntype = "float"\nlow = 0.0\nhihg = 1.0\n'),
    Case("missing_parameter_key", SEARCH,
         "atoll: error: space.x: a float parameter needs high",
         toml='[space.x]\ntype = "float"\nlow = 0.0\n'),
    Case("missing_parameter_type", SEARCH,
         "atoll: error: space.x.type: missing; use one of 'float', 'int', 'categorical', "
         "'ordinal'", toml="[space.x]\nlow = 0.0\nhigh = 1.0\n"),
    Case("unknown_parameter_type", SEARCH,
         "atoll: error: space.x.type: 'double' is not a parameter type; use one of 'float', "
         "'int', 'categorical', 'ordinal'",
         toml='[space.x]\ntype = "double"\nlow = 0.0\nhigh = 1.0\n'),
    Case("bad_override", ("search", "--run-dir", "{run_dir}", "--set", "search.islands"),
         "atoll: error: --set 'search.islands': expected KEY=VALUE, e.g. search.islands=2"),
    # wrong types and values
    Case("string_for_int", SEARCH,
         "atoll: error: search.generations: expected an integer >= 1, got '10'",
         toml='[search]\ngenerations = "10"\n'),
    Case("float_for_int", SEARCH,
         "atoll: error: search.generations: expected an integer >= 1, got 2.5",
         toml="[search]\ngenerations = 2.5\n"),
    Case("bool_for_number", SEARCH,
         "atoll: error: evolution.crossover: expected a probability in [0, 1], got True",
         toml="[evolution]\ncrossover = true\n"),
    Case("string_for_bound", SEARCH,
         "atoll: error: space.x.low: expected a number, got 'a'",
         toml='[space.x]\ntype = "float"\nlow = "a"\nhigh = 1.0\n'),
    Case("float_for_int_bound", SEARCH,
         "atoll: error: space.n.low: expected an integer, got 1.5",
         toml='[space.n]\ntype = "int"\nlow = 1.5\nhigh = 3\n'),
    Case("probability_above_1", SEARCH,
         "atoll: error: migration.probability: expected a probability in [0, 1], got 1.5",
         toml="[migration]\nprobability = 1.5\n"),
    Case("misspelt_choice", SEARCH,
         "atoll: error: evolution.selection: expected one of 'best', 'uniform', 'tournament', "
         "got 'tournamnt'; did you mean 'tournament'?",
         toml='[evolution]\nselection = "tournamnt"\n'),
    Case("misspelt_strategy", SEARCH,
         "atoll: error: evolution.strategy: expected one of 'ga', 'cmaes', 'hybrid', 'pbt', got "
         "'cma-es'; "
         "did you mean 'cmaes'?", toml='[evolution]\nstrategy = "cma-es"\n'),
    Case("island_strategies_of_another_length", SEARCH,
         "atoll: error: evolution.island_strategies: 3 strategies for search.islands = 2; give "
         "one per island, or none to run evolution.strategy on every island",
         toml='[search]\nislands = 2\n[evolution]\nisland_strategies = ["ga", "cmaes", '
              '"ga"]\n'),
    Case("misspelt_pruning_rule", SEARCH,
         "atoll: error: pruning.rule: expected one of 'none', 'median', 'halving', 'asha', got "
         "'medain'; did you mean 'median'?", toml='[pruning]\nrule = "medain"\n'),
    Case("asha_rungs_past_the_last_epoch", SEARCH,
         "atoll: error: pruning.min_epochs: 12 is not below pruning.max_epochs = 9, so no rung "
         "comes before a full evaluation ends and 'asha' would judge nothing; lower min_epochs "
         "or raise max_epochs",
         toml='[pruning]\nrule = "asha"\nmin_epochs = 12\nmax_epochs = 9\n'),
    # ranges
    Case("reversed_float_range", SEARCH,
         "atoll: error: space.x: low=2.0 is above high=1.0; swap the bounds",
         toml='[space.x]\ntype = "float"\nlow = 2.0\nhigh = 1.0\n'),
    Case("empty_parameter_name", SEARCH,
         "atoll: error: space: the parameter name '' is empty or has control characters; give "
         "it a name the record's columns can hold",
         toml='[space.""]\ntype = "float"\nlow = 0.0\nhigh = 1.0\n'),
    Case("int_choice_beyond_64_bits", SEARCH,
         "atoll: error: space.c: the choice 99999999999999999999 does not fit in 64 bits; give "
         "a smaller number, or the value as a string",
         toml='[space.c]\ntype = "categorical"\nchoices = [1, 99999999999999999999]\n'),
    Case("reversed_int_range", SEARCH,
         "atoll: error: space.n: low=5 is above high=1; swap the bounds",
         toml='[space.n]\ntype = "int"\nlow = 5\nhigh = 1\n'),
    Case("empty_choices", SEARCH,
         "atoll: error: space.c.choices: is empty; give at least one value",
         toml='[space.c]\ntype = "categorical"\nchoices = []\n'),
    Case("empty_ordinal_values", SEARCH,
         "atoll: error: space.o.values: is empty; give at least one value",
         toml='[space.o]\ntype = "ordinal"\nvalues = []\n'),
    Case("log_scale_low_zero", SEARCH,
         "atoll: error: space.lr: log scale needs low > 0, got low=0.0; use a positive lower "
         "bound or log = false",
         toml='[space.lr]\ntype = "float"\nlow = 0.0\nhigh = 1.0\nlog = true\n'),
    Case("log_scale_low_negative", SEARCH,
         "atoll: error: space.lr: log scale needs low > 0, got low=-1.0; use a positive lower "
         "bound or log = false",
         toml='[space.lr]\ntype = "float"\nlow = -1.0\nhigh = 1.0\nlog = true\n'),
    # the objective
    Case("objective_module_not_found", SEARCH,
         "atoll: error: objective.name: cannot import module 'no_such_pkg.mod' (No module named "
         "'no_such_pkg'); looked on PYTHONPATH and in {tmp}, {root}: check the name, or put the "
         "module there or its directory on PYTHONPATH",
         toml='[objective]\nname = "no_such_pkg.mod:f"' + SPACE),
    Case("objective_module_fails_to_import", SEARCH,
         "atoll: error: objective.name: importing 'broken_objective' failed with "
         "ZeroDivisionError: division by zero",
         toml='[objective]\nname = "broken_objective:f"' + SPACE, setup=broken_module),
    Case("objective_module_exits_on_import", SEARCH,
         "atoll: error: objective.name: importing 'exiting_objective' failed with SystemExit: 2",
         toml='[objective]\nname = "exiting_objective:f"' + SPACE,
         setup=module("exiting_objective", "import sys\nsys.exit(2)\n")),
    Case("objective_module_interrupts_on_import", SEARCH,
         "atoll: error: objective.name: importing 'interrupting_objective' failed with "
         "KeyboardInterrupt", toml='[objective]\nname = "interrupting_objective:f"' + SPACE,
         setup=module("interrupting_objective", "raise KeyboardInterrupt\n")),
    Case("objective_preflight_raises", SEARCH,
         "atoll: error: objective.name: the preflight of 'raising_check:f' failed with "
         "ValueError: option x is bad",
         toml='[objective]\nname = "raising_check:f"' + SPACE,
         setup=module("raising_check", CHECKED + "def check(options, data_dir, names):\n"
                      "    raise ValueError('option x is bad')\n\n\nf.preflight = check\n")),
    Case("objective_preflight_exits", SEARCH,
         "atoll: error: objective.name: the preflight of 'exiting_check:f' failed with "
         "SystemExit: 3", toml='[objective]\nname = "exiting_check:f"' + SPACE,
         setup=module("exiting_check", CHECKED + "def check(options, data_dir, names):\n"
                      "    raise SystemExit(3)\n\n\nf.preflight = check\n")),
    Case("objective_preflight_not_callable", SEARCH,
         "atoll: error: objective.name: the preflight of 'odd_check:f' is an int, not a "
         "function; make it preflight(options, data_dir, parameter_names) or remove it",
         toml='[objective]\nname = "odd_check:f"' + SPACE,
         setup=module("odd_check", CHECKED + "f.preflight = 3\n")),
    Case("objective_attribute_missing", SEARCH,
         "atoll: error: objective.name: module 'objectives' has no attribute 'nope'",
         toml='[objective]\nname = "objectives:nope"' + SPACE),
    Case("objective_not_callable", SEARCH,
         "atoll: error: objective.name: 'objectives:BENCHMARKS' is a dict, not a function; name "
         "a callable objective(params, ctx)",
         toml='[objective]\nname = "objectives:BENCHMARKS"' + SPACE),
    Case("misspelt_builtin", SEARCH,
         "atoll: error: objective.name: 'sphre' is neither a built-in (ackley, griewank, "
         "rastrigin, rosenbrock, schwefel, sphere, step) nor 'package.module:function'; did you "
         "mean 'sphere'?", toml='[objective]\nname = "sphre"\n'),
    Case("dimensions_for_own_objective", SEARCH,
         "atoll: error: objective.dimensions: only a built-in benchmark takes dimensions, got 3 "
         "for 'objectives:slow_sphere'; describe its [space] instead",
         toml='[objective]\nname = "objectives:slow_sphere"\ndimensions = 3' + SPACE),
    Case("mnist_data_dir_missing", SEARCH,
         "atoll: error: mnist: data directory {tmp}/no-mnist does not exist; "
         + STAGE.replace("{data}", "no-mnist"),
         toml=MNIST.replace("DATA", "no-mnist")),
    Case("mnist_data_dir_empty", SEARCH,
         "atoll: error: mnist: missing {tmp}/empty-mnist/MNIST/raw/train-images-idx3-ubyte; "
         + STAGE.replace("{data}", "empty-mnist"),
         toml=MNIST.replace("DATA", "empty-mnist"), setup=empty_dir("empty-mnist")),
    # config files
    Case("config_file_missing", ("search", "--config", "{tmp}/missing.toml", "--run-dir",
                                 "{run_dir}"),
         "atoll: error: {tmp}/missing.toml: no such config file"),
    Case("config_file_empty", SEARCH,
         "atoll: error: {config}: the config file sets nothing (empty, or comments only); write "
         "the search in it, or leave out --config to run the embedded default",
         toml="# the search, to be written\n"),
    Case("config_is_a_directory", ("search", "--config", "{tmp}", "--run-dir", "{run_dir}"),
         "atoll: error: {tmp}: is a directory, not a config file"),
    Case("config_not_utf8", ("search", "--config", "{tmp}/latin1.toml", "--run-dir",
                             "{run_dir}"),
         "atoll: error: {tmp}/latin1.toml: not UTF-8 text (invalid continuation byte at byte 5)",
         setup=latin1_config),
    # rank layouts (under mpirun: every rank stops, rank 0 prints the line)
    Case("ranks_not_divisible_on_resume", RESUME + ("--set", "search.ranks_per_worker=2"),
         "atoll: error: 3 MPI ranks cannot form workers of ranks_per_worker=2: start a multiple "
         "of 2 ranks or change search.ranks_per_worker", setup=existing_run, ranks=3),
    # run directories
    Case("run_dir_is_a_file", SEARCH_SLOW,
         "atoll: error: {run_dir}: is a file, not a directory; choose an empty or new directory "
         "for the run", setup=a_file),
    Case("run_dir_holds_foreign_files", SEARCH_SLOW,
         "atoll: error: {run_dir}: not empty and not an Atoll run (it holds data.csv, notes.txt); "
         "choose an empty or new directory", setup=foreign_files),
    Case("search_with_another_space", SEARCH_SLOW + ("--set", "space.x1.high=2.0"),
         "atoll: error: {run_dir}: the search space differs from the run's: space.x1.high is "
         "5.12 in the run, 2.0 in the given space; resume with the run's space or start a new run "
         "directory", setup=existing_run),
    Case("search_with_other_settings", ("search", "--config", SLOW_CONFIG, "--run-dir",
                                        "{run_dir}", "--set", "search.generations=6"),
         "atoll: error: {run_dir}: holds a run with search.generations = 4, not 6; continue it "
         "with 'atoll resume {run_dir}' or use a new run directory", setup=existing_run),
    Case("resume_of_a_foreign_dir", RESUME,
         "atoll: error: {run_dir}: not an Atoll run (no run.h5 in it); give the directory of an "
         "Atoll run, or use 'atoll search' to start a new one", setup=foreign_files),
    Case("resume_of_a_missing_dir", RESUME,
         "atoll: error: {run_dir}: no such directory; give the directory of an Atoll run"),
    Case("resume_of_a_file", RESUME,
         "atoll: error: {run_dir}: is a file, not a directory; give the directory of an Atoll "
         "run", setup=a_file),
    Case("resume_with_checkpoints_a_file", RESUME + ("--set", "search.evaluations=9"),
         "atoll: error: {run_dir}/checkpoints: is not a directory, but the run keeps its "
         "checkpoints there; move it out of the run directory",
         setup=run_with_a_file_as("checkpoints")),
    Case("resume_with_logs_a_file", RESUME + ("--set", "search.evaluations=9"),
         "atoll: error: {run_dir}/logs: is not a directory, but the run keeps its logs there; "
         "move it out of the run directory", setup=run_with_a_file_as("logs")),
    Case("resume_with_results_a_directory", RESUME + ("--set", "search.evaluations=9"),
         "atoll: error: {run_dir}/results.h5: is a directory, but the run writes its results "
         "there; move it out of the run directory", setup=results_as_a_directory),
    Case("resume_with_a_disallowed_set", RESUME + ("--set", "evolution.mutation=0.9"),
         "atoll: error: --set 'evolution.mutation=0.9': a resume may change only "
         "search.ranks_per_worker, search.islands, search.wall_time, record.flush_interval, "
         "search.evaluations, search.give_up_after; start a new run to change "
         "evolution.mutation",
         setup=existing_run),
    Case("consolidate_of_a_results_file", ("consolidate", "{run_dir}/results.h5"),
         "atoll: error: {run_dir}/results.h5: is a file; give the run's directory: "
         "'atoll consolidate {run_dir}'", setup=existing_run),
    Case("inspect_of_a_config_file", ("inspect", "{config}"),
         "atoll: error: {config}: not an Atoll run (not an HDF5 file); give the directory of an "
         "Atoll run (or its results.h5)", toml="[search]\ngenerations = 3\n"),
    Case("report_of_the_run_file", ("report", "{run_dir}/run.h5"),
         "atoll: error: {run_dir}/run.h5: is one of a run's files; give the run's directory "
         "({run_dir})", setup=existing_run),
    Case("inspect_of_a_worker_file", ("inspect", "{run_dir}/workers/job000-worker00000.h5"),
         "atoll: error: {run_dir}/workers/job000-worker00000.h5: is one of a run's files; give "
         "the run's directory ({run_dir})", setup=existing_run),
    Case("inspect_of_a_foreign_dir", INSPECT,
         "atoll: error: {run_dir}: not an Atoll run (no run.h5, worker files or results.h5)",
         setup=foreign_files),
    Case("inspect_of_a_missing_dir", INSPECT,
         "atoll: error: {run_dir}: no such file or directory; give the directory of an Atoll run "
         "(or its results.h5)"),
    # damaged, newer and mismatched files
    Case("truncated_run_file", RESUME,
         "atoll: error: {run_dir}/run.h5: damaged or not an HDF5 file (Unable to synchronously "
         "open file (truncated file: eof = 4096, sblock->base_addr = 0, stored_eof = {size})); "
         "restore it from a backup, or start a new run directory", setup=truncated_run_file),
    Case("truncated_run_file_inspect", INSPECT,
         "atoll: error: {run_dir}/run.h5: damaged or not an HDF5 file (Unable to synchronously "
         "open file (truncated file: eof = 4096, sblock->base_addr = 0, stored_eof = {size})); "
         "restore it from a backup", setup=truncated_run_file),
    Case("garbage_worker_file", RESUME,
         "atoll: error: {run_dir}/workers/job000-worker00000.h5: damaged or not an HDF5 file "
         "(Unable to synchronously open file (file signature not found)); move it out of "
         "{run_dir}/workers to resume without its rows", setup=garbage_worker_file),
    Case("garbage_results_file_given", ("inspect", "{run_dir}/results.h5"),
         "atoll: error: {run_dir}/results.h5: damaged or not an HDF5 file (Unable to "
         "synchronously open file (file signature not found)); read the run from its worker "
         "files instead: 'atoll inspect {run_dir}'", setup=garbage_results_file),
    Case("garbage_results_file_alone", INSPECT,
         "atoll: error: {run_dir}/results.h5: damaged or not an HDF5 file (Unable to "
         "synchronously open file (file signature not found)); no worker files are beside it "
         "to read the run from; restore it from a backup", setup=garbage_results_file_alone),
    Case("newer_schema", RESUME,
         "atoll: error: {run_dir}/run.h5: written with record schema version 99, but this atoll "
         "reads up to version 2; upgrade atoll to read or resume this run", setup=newer_schema),
    Case("newer_schema_search", SEARCH_SLOW,
         "atoll: error: {run_dir}/run.h5: written with record schema version 99, but this atoll "
         "reads up to version 2; upgrade atoll to read or resume this run", setup=newer_schema),
    Case("worker_file_of_another_space", RESUME,
         "atoll: error: {run_dir}/workers/job000-worker00000.h5: its search space differs from "
         "run.h5's: space.x1.high is 1.0 in the worker file, 5.12 in run.h5; move it out of "
         "{run_dir}/workers to resume without its rows", setup=worker_of_another_space),
    Case("worker_rows_negative", RESUME,
         "atoll: error: {run_dir}/workers/job000-worker00000.h5: table 'individuals' claims "
         "'-1' committed rows but holds 4: the file is damaged; restore it from a backup, or "
         "move it out of the run directory", setup=worker_rows_negative),
    Case("worker_rows_negative_inspect", INSPECT,
         "atoll: error: {run_dir}/workers/job000-worker00000.h5: table 'individuals' claims "
         "'-1' committed rows but holds 4: the file is damaged; restore it from a backup, or "
         "move it out of the run directory", setup=worker_rows_negative),
    Case("jobs_rows_huge", RESUME + ("--set", "search.evaluations=8"),
         "atoll: error: {run_dir}/run.h5: table 'jobs' claims '1000000' committed rows but "
         "holds 1: the file is damaged; restore it from a backup, or move it out of the run "
         "directory", setup=jobs_rows_huge),
    Case("budget_not_a_count", RESUME,
         "atoll: error: {run_dir}/run.h5: attribute 'budget' is 'lots', not a count: the file "
         "is damaged; restore it from a backup", setup=budget_not_a_count),
    Case("budget_not_a_count_inspect", INSPECT,
         "atoll: error: {run_dir}/run.h5: attribute 'budget' is 'lots', not a count: the file "
         "is damaged; restore it from a backup", setup=budget_not_a_count),
    *(Case(f"status_out_of_enum_{argv[0]}", argv,
           "atoll: error: {run_dir}/workers/job000-worker00000.h5: table 'individuals' row 1: "
           "status is 7, not one of failed, interrupted, ok, paused, pruned: the file is damaged; "
           "restore it from a backup, or move it out of the run directory",
           setup=status_out_of_enum) for argv in (RESUME, INSPECT, REPORT)),
    *(Case(f"id_twice_{argv[0]}", argv,
           "atoll: error: {run_dir}/workers/job000-worker00000.h5: table 'individuals': "
           "individual id 0 is recorded twice: the file is damaged; restore it from a backup, "
           "or move it out of the run directory", setup=id_twice)
      for argv in (RESUME, INSPECT, REPORT)),
    *(Case(f"{what}_{argv[0]}", argv,
           "atoll: error: {run_dir}/workers/job000-worker00000.h5: table 'individuals': rows 0 "
           "to 3 do not match their checksum (a value in them changed after it was written): "
           "the file is damaged; restore it from a backup, or move it out of the run directory",
           setup=edited_row(column, 2, value))
      for argv in (RESUME, INSPECT, REPORT)
      for what, column, value in (("loss_overwritten", "loss", -1e300),
                                  ("id_overwritten", "id", 2**62))),
    *(Case(f"id_in_two_files_{argv[0]}", argv,
           "atoll: error: {run_dir}/workers/job001-worker00000.h5: individual id 0 is recorded "
           "in job000-worker00000.h5 too: one of the two files is damaged or a copy; restore it "
           "from a backup, or move it out of the run directory", setup=id_in_two_files)
      for argv in (RESUME, INSPECT, REPORT)),
    Case("run_file_gone", RESUME,
         "atoll: error: {run_dir}/run.h5: not found, but the run's other files are there; "
         "restore run.h5 from a backup to resume the run ('atoll inspect' and 'atoll report' "
         "read it without run.h5)", setup=run_file_gone),
    *(Case(f"run_file_root_attributes_flipped_{argv[0]}", argv,
           "atoll: error: {run_dir}/run.h5: damaged (Can't synchronously determine if attribute "
           "exists by name (incorrect metadata checksum after all read attempts)); restore it "
           "from a backup" + hint, setup=run_file_root_attributes_flipped)
      for argv, hint in ((RESUME, ", or start a new run directory"), (INSPECT, ""))),
    Case("run_file_without_jobs_inspect", INSPECT,
         "atoll: error: {run_dir}/run.h5: damaged jobs table (\"Unable to synchronously open "
         "object (object 'jobs' doesn't exist)\"); restore it from a backup",
         setup=run_file_without_jobs),
    Case("worker_file_of_another_run", RESUME + ("--set", "search.evaluations=8"),
         "atoll: error: {run_dir}/workers/job005-worker00000.h5: belongs to another run (run id "
         "{theirs}; this run's is {ours}); move it out of {run_dir}/workers, its rows are not "
         "this run's", setup=worker_file_of_another_run),
    Case("worker_file_of_another_run_inspect", INSPECT,
         "atoll: error: {run_dir}/workers/job005-worker00000.h5: belongs to another run (run id "
         "{theirs}; this run's is {ours}); move it out of {run_dir}/workers, its rows are not "
         "this run's", setup=worker_file_of_another_run),
    Case("run_file_is_a_directory", RESUME,
         "atoll: error: {run_dir}/run.h5: is a directory, not an HDF5 file; restore it from a "
         "backup, or start a new run directory", setup=run_file_is("directory")),
    Case("run_file_is_a_directory_inspect", INSPECT,
         "atoll: error: {run_dir}/run.h5: is a directory, not an HDF5 file; restore it from a "
         "backup", setup=run_file_is("directory")),
    Case("run_file_is_a_fifo", RESUME,
         "atoll: error: {run_dir}/run.h5: is a FIFO (named pipe), not an HDF5 file; restore it "
         "from a backup, or start a new run directory", setup=run_file_is("fifo")),
    Case("run_dir_is_a_dangling_link", SEARCH_SLOW,
         "atoll: error: {run_dir}: is a symbolic link to {tmp}/purged/run, which does not "
         "exist; create that directory or remove the link", setup=dangling_link),
    # counts and sizes beyond what a run can hold
    Case("eval_timeout_beyond_the_limit", SEARCH_SLOW + ("--set", "search.eval_timeout=1e300"),
         "atoll: error: search.eval_timeout: expected a number >= 0 and at most 1e+07 (seconds: "
         "about 116 days), got 1e+300"),  # every evaluation failed with an OverflowError
    Case("generations_beyond_the_limit", SEARCH_SLOW + ("--set",
                                                        "search.generations=4611686018427387904"),
         "atoll: error: search.generations: expected an integer <= 1,000,000,000,000, got "
         "4,611,686,018,427,387,904"),
    Case("budget_beyond_the_limit", SEARCH_SLOW + ("--set", "search.generations=400000000000"),
         "atoll: error: search.generations: 400,000,000,000 per worker x 3 workers is a budget "
         "of 1,200,000,000,000, more than the 1,000,000,000,000 a run may have; lower it or set "
         "search.evaluations", ranks=3),
    Case("space_too_large_for_hdf5", SEARCH,
         "atoll: error: space: 1100 parameters (4,390 characters of names) are more than an HDF5 "
         "table's columns can describe (about 1,000 short-named ones fit; Unable to "
         "synchronously create dataset (object header message is too large)); use fewer "
         "parameters or shorter names",
         toml='[objective]\nname = "sphere"\ndimensions = 1100\n'),
    # file systems that refuse writes
    Case("read_only_new_run_dir", SEARCH_SLOW,
         "atoll: error: {run_dir}: cannot write ({why}); choose a writable directory",
         setup=read_only_empty_dir),
    # a resume with work left (a finished run needs to write nothing): its budget raised
    Case("read_only_run_resume", RESUME + ("--set", "search.evaluations=8"),
         "atoll: error: {run_dir}/workers: cannot write ({why}); choose a writable directory",
         setup=read_only_run),
    Case("full_disk_new_run", SEARCH_SLOW,
         "atoll: error: {run_dir}: cannot write (No space left on device); free some space or "
         "choose another directory", setup=full_disk),
    Case("full_disk_resume", RESUME + ("--set", "search.evaluations=8"),
         "atoll: error: {run_dir}/workers: cannot write (No space left on device); free some "
         "space or choose another directory", setup=full_disk_with_a_run),
]


# -- running a row ------------------------------------------------------------------------------

def fill(text: str, values: dict[str, str]) -> str:
    """Put the placeholders in (str.replace: TOML and messages hold other braces)."""
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def snapshot(path: Path) -> dict[str, str] | None:
    """Every file (sha256) and directory under ``path``; None if it does not exist."""
    if not os.path.lexists(path):
        return None
    if not path.is_dir():
        return {".": _entry(path)}
    return {str(p.relative_to(path)): _entry(p) for p in sorted(path.rglob("*"))}


def _entry(path: Path) -> str:
    """A file's sha256; what a directory, link or FIFO is (reading a FIFO would block)."""
    if path.is_symlink():
        return f"link to {os.readlink(path)}"
    if path.is_dir():
        return "dir"
    if not path.is_file():
        return "not a regular file"
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def base_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("base") / "run"
    done = run(atoll_cmd(*(fill(a, {"run_dir": str(base)}) for a in SEARCH_SLOW)), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return base


@contextlib.contextmanager
def prepared(case: Case, tmp: Path, base: Path) -> Iterator[tuple[list[str], str, Path]]:
    """The row's input in place; yields (command, expected line, run directory)."""
    (tmp / "mods").mkdir()
    values = {"tmp": str(tmp), "run_dir": str(tmp / "run"), "config": str(tmp / "config.toml"),
              "root": str(ROOT)}
    with contextlib.ExitStack() as stack:
        if case.setup is not None:
            values.update(case.setup(Setup(tmp, Path(values["run_dir"]), base, stack)) or {})
        if case.toml is not None:
            Path(values["config"]).write_text(fill(case.toml, values))
        args = [fill(a, values) for a in case.argv]
        cmd = mpirun_cmd(case.ranks, "-m", "atoll", *args) if case.ranks else atoll_cmd(*args)
        yield cmd, fill(case.expected, values), Path(values["run_dir"])


def env_for(tmp: Path) -> dict[str, str]:
    return mpi_env(PYTHONPATH=os.pathsep.join([str(ROOT / "app"), str(ROOT / "tests"), str(ROOT),
                                               str(tmp / "mods")]))


@contextlib.contextmanager
def root_logging_kept() -> Iterator[None]:
    """The command sets up the console log (on the runner's stream, closed afterwards): the
    root logger is put back as it was for the tests that run after it in this process."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)


def run_in_process(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """The command line of ``atoll`` run by click's runner, here (from the checkout, as a
    process would be); its outcome as a process's would read."""
    from atoll.cli import cli

    with root_logging_kept(), contextlib.chdir(ROOT):
        result = CliRunner().invoke(cli, argv, prog_name="atoll")
    trace = "".join(traceback.format_exception(result.exception)) \
        if result.exception is not None and not isinstance(result.exception, SystemExit) else ""
    return subprocess.CompletedProcess(argv, result.exit_code, result.stdout,
                                       result.stderr + trace)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(case: Case, tmp_path: Path,
                                                          base_run: Path) -> None:
    with prepared(case, tmp_path, base_run) as (cmd, expected, run_dir):
        before = snapshot(run_dir)
        if case.in_process:
            done = run_in_process(cmd[cmd.index("atoll") + 1:])
        else:
            done = run(cmd, timeout=120, env=env_for(tmp_path))
        after = snapshot(run_dir)
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    if case.ranks:
        assert done.returncode != 0
        assert done.stderr.splitlines().count(expected) == 1, done.stderr
    else:
        assert done.returncode == 2, done.stderr
        assert done.stderr == expected + "\n"
        assert done.stdout == ""
    assert after == before  # same files, same bytes, nothing new (or still nothing at all)


def test_a_space_far_too_large_is_refused_at_once(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[objective]\nname = "sphere"\ndimensions = 100000\n')
    done = run(atoll_cmd("search", "--config", str(config), "--run-dir", str(tmp_path / "run")),
               timeout=30, env=env_for(tmp_path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr == (
        "atoll: error: space: 100000 parameters (588,890 characters of names) are more than an "
        "HDF5 table's columns can describe (about 1,000 short-named ones fit; no table has more "
        "than 4,096 columns); use fewer parameters or shorter names\n")
    assert not (tmp_path / "run").exists()


def test_debug_shows_the_traceback(tmp_path: Path, base_run: Path) -> None:
    case = next(c for c in CASES if c.id == "newer_schema")
    with prepared(case, tmp_path, base_run) as (cmd, expected, _):
        done = run([*cmd, "--debug"], timeout=120, env=env_for(tmp_path))
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert done.stderr.rstrip().splitlines()[-1].endswith(
        ": " + expected.removeprefix("atoll: error: ")), done.stderr[-2000:]




# -- a rank lost to a hard kill -----------------------------------------------------------------

def test_a_killed_rank_ends_the_job_with_a_message_and_resume_completes_it(tmp_path: Path
                                                                          ) -> None:
    run_dir = tmp_path / "lost"
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    cmd = mpirun_cmd(4, "-m", "atoll", "search", "--config", SLOW_CONFIG, "--run-dir",
                     str(run_dir), "--set", "search.generations=150",
                     "--set", "record.flush_interval=0.2")
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=mpi_env(), start_new_session=True,
                                stdout=stdout, stderr=stderr)
    try:
        deadline = time.monotonic() + 90
        while len(list(run_dir.glob("workers/*.h5"))) < 4 and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(list(run_dir.glob("workers/*.h5"))) == 4, err.read_text()[-2000:]
        time.sleep(1)
        while not completed_count(open_run(run_dir).individuals) and \
                time.monotonic() < deadline:  # something flushed, so the resume has a start
            time.sleep(0.1)
        ranks = rank_pids(proc.pid)
        assert sorted(ranks) == [0, 1, 2, 3], ranks
        os.kill(ranks[2], signal.SIGKILL)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"mpirun still runs 60 s after rank 2 was killed:\n{err.read_text()}")
    finally:
        kill_tree(proc)
    assert code != 0
    gone = time.monotonic() + 10
    while any(alive(p) for p in ranks.values()) and time.monotonic() < gone:
        time.sleep(0.1)
    assert not any(alive(p) for p in ranks.values()), "a rank outlived mpirun"
    message = " ".join(err.read_text().split())  # Open MPI wraps its box at 72 columns
    found = re.search(r"process rank 2 with PID (\d+) on node (\S+) exited on signal 9 "
                      r"\(Killed\)", message)
    assert found, message[-3000:]
    assert int(found[1]) == ranks[2]
    assert found[2] in {socket.gethostname(), socket.gethostname().split(".")[0]}
    first = completed_count(open_run(run_dir).individuals)
    assert 0 < first < 600

    done = mpirun_atoll(4, "resume", str(run_dir), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    record = open_run(run_dir)
    assert completed_count(record.individuals) == 600
    assert len(np.unique(record.individuals["id"])) == len(record.individuals)
    assert len(record.jobs) == 2
