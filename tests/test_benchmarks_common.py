"""benchmarks/common.py's launches: what the ranks of a benchmark import."""

from __future__ import annotations

import sys
from pathlib import Path

from conftest import MPI_TMPDIR, ROOT, run

BENCHMARKS = ROOT / "benchmarks"
sys.path.append(str(BENCHMARKS))  # after tests/: its objectives.py is not the tests' one

import common  # noqa: E402


def test_the_ranks_of_a_benchmark_import_atoll_from_its_own_tree(tmp_path):
    """A worktree's benchmark measures its own code, not the checkout the venv's editable
    install points at."""
    script = tmp_path / "where.py"
    script.write_text("import atoll\nprint(atoll.__file__)\n")
    done = run(common.mpirun_command(Path(sys.executable), script, 2),
               env=common.mpi_env({"TMPDIR": str(MPI_TMPDIR)}))
    assert done.returncode == 0, done.stderr[-2000:]
    files = [Path(line).resolve() for line in done.stdout.split()]
    assert len(files) == 2
    assert all(f.is_relative_to((ROOT / "app").resolve()) for f in files), files
