"""What README.md and the commands' --help show runs as written.

The README's shell blocks run in order as one script, as in one shell session, in a scratch
directory that holds the
repository's examples and venv (so its runs/ land there), with the environment a user of this
machine has; its Python blocks run after them. `make test` is what CI runs; `make run` is run by
tests/test_classifier.py. Blocks fenced as ```text are output or cluster-only commands (srun,
apptainer), which the jobscript and container tests run where they can.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from atoll.record import open_run
from conftest import BIN, ROOT, mpi_env, run_once

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
MAKE_TARGETS = {"make run", "make test"}


def blocks(kind: str) -> list[str]:
    return [body for lang, body in FENCE.findall((ROOT / "README.md").read_text()) if lang == kind]


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    for name in ("examples", ".venv"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def user_env() -> dict[str, str]:
    """This machine's user: the venv not yet active, and Open MPI allowed to run more ranks than
    this machine's 2 cores (what a node with enough cores gives without asking): the README's
    and --help's commands say --oversubscribe only where a laptop needs it."""
    env = {k: v for k, v in mpi_env().items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != str(BIN))
    env["PRTE_MCA_rmaps_default_mapping_policy"] = ":OVERSUBSCRIBE"
    return env


def test_every_shell_block_is_known_and_the_make_block_names_the_two_targets() -> None:
    shell = blocks("bash")
    assert shell, "the README shows no shell commands?"
    first = {line.split("#")[0].strip() for line in shell[0].splitlines()} - {""}
    assert first == MAKE_TARGETS


@pytest.mark.slow
def test_the_readme_shell_blocks_and_then_its_python_blocks_run_as_written(sandbox: Path):
    script = "\n".join(blocks("bash")[1:])
    done = run_once(["bash", "-euo", "pipefail", "-c", script], 900, sandbox, user_env())
    assert done.returncode == 0, f"{script}\n--- stdout\n{done.stdout[-3000:]}\n" \
                                 f"--- stderr\n{done.stderr[-3000:]}"
    for code in blocks("python"):
        done = run_once([str(BIN / "python"), "-c", code], 300, sandbox, user_env())
        assert done.returncode == 0, f"{code}\n{done.stderr[-3000:]}"
    assert len(open_run(sandbox / "runs" / "sphere").individuals) == 1000  # extended
    assert (sandbox / "runs" / "mine" / "results.h5").is_file()


HELP_EXAMPLE = re.compile(r"^\s+((?:mpirun|atoll) .*?)(\\\\?)$")


def help_examples(command: str) -> list[str]:
    """The example command lines of ``atoll COMMAND --help`` (continued lines joined)."""
    text = subprocess.run([sys.executable, "-m", "atoll", command, "--help"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    found, pending = [], ""
    for line in text.split("Example")[1].splitlines()[1:] if "Example" in text else []:
        stripped = line.strip()
        if not stripped:
            continue
        if pending:
            pending += " " + stripped.rstrip("\\").strip()
        elif stripped.startswith(("atoll ", "mpirun ")):
            pending = stripped.rstrip("\\").strip()
        if not stripped.endswith("\\") and pending:
            found.append(pending)
            pending = ""
    return found


@pytest.mark.slow
def test_the_help_examples_run_as_written(sandbox: Path):
    env = user_env()
    env["PATH"] = os.pathsep.join([str(BIN), env["PATH"]])  # as after `source .venv/bin/activate`
    commands = [c for name in ("search", "report", "watch", "resume") for c in help_examples(name)]
    assert len(commands) >= 4, commands
    for command in commands:
        done = run_once(shlex.split(command), 600, sandbox, env)
        assert done.returncode == 0, f"{command}\n{done.stderr[-3000:]}"


def test_the_config_reference_is_valid_and_shows_the_defaults() -> None:
    """The README's TOML block lists every section with its defaults: it parses (with a
    ``module:function`` objective, since a built-in's ``dimensions`` excludes ``[space]``), and
    each section equals what an empty config gets."""
    import tomllib

    from atoll.config import parse_config

    (block,) = [b for b in blocks("toml") if "[search]" in b]  # the reference, not a fragment
    table = tomllib.loads(block)
    assert table["objective"].pop("dimensions") == 2
    table["objective"]["name"] = "mymodule:objective"
    config = parse_config(table)
    defaults = parse_config({"objective": {"name": "sphere"}})
    for section in ("search", "evolution", "migration", "record", "distributed", "pruning",
                    "inherit", "pbt"):
        assert getattr(config, section) == getattr(defaults, section), section
    assert config.objective.direction == defaults.objective.direction
    assert config.seed == defaults.seed
