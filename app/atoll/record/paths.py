"""Every path inside a run directory, built in one place."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

RUN_FILE = "run.h5"
WORKERS_DIR = "workers"
RESULTS_FILE = "results.h5"
WORKER_GLOB = "job*-worker*.h5"
_WORKER_NAME = re.compile(r"job(\d+)-worker(\d+)\.h5")


@dataclass(frozen=True)
class RunPaths:
    """The layout of a run directory::

        RUN_DIR/run.h5                            config, space, jobs (world rank 0 only)
        RUN_DIR/workers/job000-worker00000.h5     one per worker leader and job (the checkpoint)
        RUN_DIR/results.h5                        everything in single tables, written at the end
        RUN_DIR/.results.h5.lock                  locked while one process writes results.h5
        RUN_DIR/models/ind000000000042.h5         best weights of the top individuals (if any)
        RUN_DIR/checkpoints/ind000000000042.h5    last training state of an unfinished individual
        RUN_DIR/checkpoints/ind000000000042/      a command objective's own checkpoint files
        RUN_DIR/checkpoints/ind000000000042.promoting  held while a worker promotes it (asha)
        RUN_DIR/checkpoints/ind000000000042.inherited/ links to the parent's files it inherits
        RUN_DIR/checkpoints/ind000000000042.holds/job001-worker00003-v2  a leader still wants it
        RUN_DIR/logs/job000-rank00000.log         each rank's log of each job
        RUN_DIR/logs/ind000000000042-rank0.log    a command objective's output, per worker rank
        RUN_DIR/work/ind000000000042/             a command objective's work directory
    """

    run_dir: Path

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        object.__setattr__(self, "run_dir", Path(run_dir))

    @property
    def run_file(self) -> Path:
        return self.run_dir / RUN_FILE

    @property
    def workers_dir(self) -> Path:
        return self.run_dir / WORKERS_DIR

    @property
    def results_file(self) -> Path:
        return self.run_dir / RESULTS_FILE

    @property
    def results_lock(self) -> Path:
        return self.run_dir / f".{RESULTS_FILE}.lock"

    def worker_file(self, job: int, worker: int) -> Path:
        return self.workers_dir / f"job{job:03d}-worker{worker:05d}.h5"

    @property
    def logs_dir(self) -> Path:
        return self.run_dir / "logs"

    def log_file(self, job: int, rank: int) -> Path:
        return self.logs_dir / f"job{job:03d}-rank{rank:05d}.log"

    def command_log(self, individual_id: int, rank: int) -> Path:
        """The stdout and stderr of one worker rank's command for one individual."""
        return self.logs_dir / f"ind{individual_id:012d}-rank{rank}.log"

    @property
    def work_root(self) -> Path:
        """The command objectives' working directories, one per individual."""
        return self.run_dir / "work"

    def work_dir(self, individual_id: int) -> Path:
        """Where a command objective may write its files for one individual."""
        return self.work_root / f"ind{individual_id:012d}"

    @property
    def models_dir(self) -> Path:
        return self.run_dir / "models"

    @property
    def report_dir(self) -> Path:
        """Where ``atoll report`` writes unless told ``--out``."""
        return self.run_dir / "report"

    def model_file(self, individual_id: int) -> Path:
        return self.models_dir / f"ind{individual_id:012d}.h5"

    def model_dir(self, individual_id: int) -> Path:
        """The kept files of a command objective's individual (its checkpoint directory)."""
        return self.models_dir / f"ind{individual_id:012d}"

    def model_files(self) -> dict[int, Path]:
        """Stored weights by individual id: weight files, and commands' kept directories."""
        if not self.models_dir.is_dir():
            return {}
        found = {}
        for path in self.models_dir.glob("ind*"):
            ident = path.name[3:].removesuffix(".h5")
            if ident.isdigit() and (path.suffix == ".h5") != path.is_dir():
                found[int(ident)] = path
        return found

    @property
    def checkpoints_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    def checkpoint_file(self, individual_id: int) -> Path:
        return self.checkpoints_dir / f"ind{individual_id:012d}.h5"

    def command_checkpoint_dir(self, individual_id: int) -> Path:
        """Where a command objective's script keeps its own checkpoint (its format, never read
        by Atoll) while the individual may be continued."""
        return self.checkpoints_dir / f"ind{individual_id:012d}"

    def inherited_dir(self, individual_id: int) -> Path:
        """Where a command objective's script finds the files of the parent's checkpoint it
        inherits (hard links or copies: the parent's own files are never offered)."""
        return self.checkpoints_dir / f"ind{individual_id:012d}.inherited"

    def promotion_claim(self, individual_id: int) -> Path:
        """The claim of the worker promoting a paused individual (:mod:`atoll.record.promotion`)."""
        return self.checkpoints_dir / f"ind{individual_id:012d}.promoting"

    def holds_dir(self, individual_id: int) -> Path:
        """The holds on a kept checkpoint: one empty file per worker leader that still wants it
        for children to inherit (:mod:`atoll.record.holds`)."""
        return self.checkpoints_dir / f"ind{individual_id:012d}.holds"

    def hold_file(self, individual_id: int, job: int, worker: int, version: int) -> Path:
        return self.holds_dir(individual_id) / f"job{job:03d}-worker{worker:05d}-v{version}"

    def holds_dirs(self) -> dict[int, Path]:
        """The held checkpoints' holds by individual id."""
        if not self.checkpoints_dir.is_dir():
            return {}
        return {int(p.name[3:-6]): p for p in self.checkpoints_dir.glob("ind*.holds")
                if p.name[3:-6].isdigit()}

    def command_checkpoint_dirs(self) -> dict[int, Path]:
        """Command objectives' own checkpoint directories by individual id."""
        if not self.checkpoints_dir.is_dir():
            return {}
        return {int(p.name[3:]): p for p in self.checkpoints_dir.glob("ind*")
                if p.name[3:].isdigit() and p.is_dir()}

    def checkpoint_files(self) -> dict[int, Path]:
        """Stored checkpoints by individual id."""
        if not self.checkpoints_dir.is_dir():
            return {}
        return {int(p.stem[3:]): p for p in self.checkpoints_dir.glob("ind*.h5")
                if p.stem[3:].isdigit()}

    def worker_files(self, before_job: int | None = None) -> list[Path]:
        """The worker files that exist, in (job, worker) order; only earlier jobs' if asked."""
        if not self.workers_dir.is_dir():
            return []
        found = [p for p in self.workers_dir.glob(WORKER_GLOB) if p.is_file()]
        if before_job is not None:
            found = [p for p in found if _job_worker(p)[0] < before_job]
        return sorted(found, key=_job_worker)

    def temp_for(self, path: Path) -> Path:
        return temp_for(path)


def temp_for(path: Path) -> Path:
    """Where ``path`` is written before an atomic ``os.replace`` puts it in place."""
    return path.with_name(f".{path.name}.tmp")


def job_of(worker_file: str | os.PathLike[str]) -> int:
    """The job that wrote a worker file (-1 for a name that is not a worker file's)."""
    return _job_worker(Path(worker_file))[0]


def is_worker_file(path: Path) -> bool:
    """Whether ``path`` is named as a worker file in a run's ``workers`` folder."""
    return path.parent.name == "workers" and _WORKER_NAME.fullmatch(path.name) is not None


def _job_worker(path: Path) -> tuple[int, int, str]:
    """Sort key: numeric, so that job 1000 comes after job 999."""
    match = _WORKER_NAME.fullmatch(path.name)
    if match is None:
        return (-1, -1, path.name)
    return (int(match[1]), int(match[2]), path.name)
