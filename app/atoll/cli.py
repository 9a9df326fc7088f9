"""The ``atoll`` command line. Commands are thin: parse, build a config, call the library.

Only what a command needs is imported inside it: ``atoll --help`` and the commands that only
read files never import torch or start MPI.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click

from atoll import __version__
from atoll.exit_codes import EXIT_BAD_INPUT
from atoll.watcher import progress_lines


class RunDir(click.Path):
    """A run directory: a path, never empty (an empty one would be the current directory)."""

    name = "run_dir"

    def __init__(self) -> None:
        super().__init__(path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("is empty; give the run's directory, e.g. runs/sphere", param, ctx)
        return super().convert(value, param, ctx)


def _fail(message: str, rank: int) -> NoReturn:
    if rank == 0:
        click.echo(f"atoll: error: {message}", err=True)
    sys.exit(EXIT_BAD_INPUT)


def _guarded(action: Callable[[], Any], debug: bool) -> Any:
    """Turn user errors into one line and exit code 2, on every rank, without a traceback."""
    from atoll.errors import AtollError
    from atoll.logs import launcher_rank

    try:
        return action()
    except AtollError as exc:
        if debug:
            raise
        _fail(str(exc), launcher_rank())


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="atoll")
def cli() -> None:
    """Atoll: asynchronous island-model evolutionary hyperparameter search over MPI.

    Run under mpirun/srun for many ranks, or alone as a world of one. Exit codes: 0 done,
    2 bad input (config, search space, rank layout, run directory), 70 gave up: evaluations
    kept failing and none succeeded (fix the objective, then resume), 74 stopped because the
    disk (or quota) is full: free space, then resume, 75 stopped early by a signal (SIGTERM,
    SIGUSR1, SIGINT, SIGHUP to a rank; SIGUSR1 to mpirun) or the wall time: resume to continue.
    SIGTERM or Ctrl-C to mpirun: Open MPI ends the job and exits 1; 'atoll inspect' shows
    how it ended. A search that fails on some ranks only ends every rank with exit code 1 after
    one line naming the rank and the cause.
    """


def _progress_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """-q, -v and --progress-interval, shared by the commands that run a job."""
    for option in reversed((
            click.option("-q", "--quiet", is_flag=True, help="No progress lines while it runs."),
            click.option("-v", "--verbose", is_flag=True,
                         help="Also a progress line for every finished individual."),
            click.option("--progress-interval", default=15.0, show_default=True,
                         type=click.FloatRange(min=0.5), metavar="SECONDS",
                         help="Seconds between progress lines (rank 0, plain text)."))):
        command = option(command)
    return command


@cli.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="TOML config file. Without it, the embedded default search runs.")
@click.option("--run-dir", required=True, type=RunDir(),
              help="Directory for the run's HDF5 record: new or empty, or holding this same "
                   "search, which is then continued.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a config key, e.g. --set search.islands=2 (repeatable).")
@click.option("--top", default=5, show_default=True, type=click.IntRange(min=0),
              help="Best individuals to list at the end.")
@_progress_options
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def search(config_path: Path | None, run_dir: Path, overrides: Sequence[str], top: int,
           quiet: bool, verbose: bool, progress_interval: float, debug: bool) -> None:
    """Start a search recorded in RUN_DIR (or continue it, if RUN_DIR holds the same search).

    \b
    Examples (with fewer cores than ranks, as on a laptop: add --oversubscribe):
      atoll search --config examples/sphere.toml --run-dir runs/sphere
      mpirun -n 4 atoll search --config examples/rastrigin.toml --run-dir runs/r \\
          --set search.islands=2 --set migration.mode=pollination
    """
    from atoll.config import load_config
    from atoll.job.runner import run_search
    from atoll.logs import launcher_rank, setup_logging

    setup_logging(launcher_rank(), debug)
    config = _guarded(lambda: load_config(config_path, overrides), debug)
    text = _config_text(config_path, overrides)
    with progress_lines(run_dir, quiet, verbose, progress_interval):
        summary = _guarded(lambda: _mpi_job(
            lambda comm: run_search(config, run_dir, comm, config_text=text)), debug)
    _finish(summary, top)


def _config_text(path: Path | None, overrides: Sequence[str]) -> str:
    """The config as the user gave it, for the record."""
    if path is None:
        from importlib.resources import files

        text = files("atoll").joinpath("default.toml").read_text()
    else:
        text = path.read_text()
    return text + "".join(f"\n# --set {o}" for o in overrides)


def _mpi_job(job: Callable[[Any], Any]) -> Any:
    """Run a collective job on the world communicator."""
    from mpi4py import MPI

    return job(MPI.COMM_WORLD)


def _finish(summary: Any, top: int) -> None:
    """Rank 0 prints the summary; every rank exits with the job's code (75: resume later)."""
    from atoll.errors import suggested
    from atoll.exit_codes import EXIT_GAVE_UP
    from atoll.logs import launcher_rank
    from atoll.record import open_run
    from atoll.views.inspect import describe
    from atoll.views.progress import take

    resume = suggested("atoll", "resume", summary.run_dir)
    if launcher_rank() == 0:
        click.echo(describe(open_run(summary.run_dir), top=top))
        if summary.job < 0:
            extend = suggested("atoll", "resume", summary.run_dir, "--set",
                               "search.evaluations=N")
            click.echo(f"\nNo job ran: the run's budget is spent. To extend it: {extend} with N "
                       "above it.")
        elif summary.disk_full:
            click.echo(f"\nThis job: {summary.evaluations} evaluations; the record keeps those "
                       "written before the disk was full (above); results.h5: not written")
        else:
            done = take(summary.run_dir)  # the progress lines' numbers, from the same record
            click.echo(f"\nThis job: {done.this_job} evaluations in "
                       f"{done.job_stop - done.job_start:.2f} s from its start, set-up included "
                       f"({done.rate:.2f}/s); results: {summary.results_file}")
        if summary.disk_full:
            click.echo(f"atoll: error: disk full: {summary.disk_full}; the rows written before "
                       f"are kept: free some space, then {resume} "
                       f"(exit code {summary.exit_code}).", err=True)
        elif summary.exit_code == EXIT_GAVE_UP:
            click.echo(f"Gave up: the objective kept failing (the error above); fix it, then "
                       f"{resume} continues the run (exit code {summary.exit_code}).", err=True)
        elif summary.exit_code:
            click.echo(f"Stopped before the budget was spent: continue with {resume} "
                       f"(exit code {summary.exit_code}).")
    sys.exit(summary.exit_code)


@cli.command()
@click.argument("run_dir", type=RunDir())
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Change a job-level setting for this job only: search.ranks_per_worker, "
                   "search.islands, search.wall_time, record.flush_interval or "
                   "search.give_up_after; or the run's total budget, search.evaluations (a "
                   "larger one extends the run).")
@click.option("--top", default=5, show_default=True, type=click.IntRange(min=0),
              help="Best individuals to list at the end.")
@_progress_options
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def resume(run_dir: Path, overrides: Sequence[str], top: int, quiet: bool, verbose: bool,
           progress_interval: float, debug: bool) -> None:
    """Continue the run in RUN_DIR until its budget is spent, under any rank layout.

    \b
    Example (a requeued job with another allocation; with fewer cores than ranks, as on a
    laptop: add --oversubscribe):
      mpirun -n 8 atoll resume runs/sphere --set search.islands=4
    """
    from atoll.job.runner import resume_search
    from atoll.logs import launcher_rank, setup_logging

    setup_logging(launcher_rank(), debug)
    with progress_lines(run_dir, quiet, verbose, progress_interval):
        summary = _guarded(lambda: _mpi_job(lambda comm: resume_search(run_dir, comm,
                                                                       overrides)), debug)
    _finish(summary, top)


def _read_without_locks() -> None:
    """Turn HDF5's file locking off for this process; call before h5py is first imported.

    The views and ``consolidate`` read a run's files without locks, as SWMR readers of files
    that are only appended to. HDF5_USE_FILE_LOCKING (the jobscripts and the image set it for
    the ranks) overrides that, so each of their opens would briefly lock a worker file whose
    writer may be reopening it, and a writer held off too long ends the search. HDF5 reads the
    variable once, when h5py loads it, so it is set here, before any import of h5py."""
    os.environ["HDF5_USE_FILE_LOCKING"] = "FALSE"


@cli.command()
@click.argument("run_dir", type=RunDir())
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=0),
              help="Best individuals to list.")
@click.option("--metric", default=None, metavar="NAME",
              help="Epoch metric shown beside the loss (default: the objective's choice, e.g. "
                   "val_accuracy for the classifier; '' for none).")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def inspect(run_dir: Path, top: int, metric: str | None, debug: bool) -> None:
    """Print a run's metadata, budget, counts by status, commonest failures and best
    individuals with their main metric (reads files only)."""
    _read_without_locks()
    from atoll.record import open_run
    from atoll.views.inspect import describe

    click.echo(_guarded(lambda: describe(open_run(run_dir), top=top, metric=metric), debug))


@cli.command()
@click.argument("run_dir", type=RunDir())
@click.option("--interval", default=15.0, show_default=True, type=click.FloatRange(min=0.5),
              metavar="SECONDS", help="Seconds between plain lines.")
@click.option("--plain", is_flag=True,
              help="Plain lines even on a terminal (the default in a file or a pipe).")
@click.option("-v", "--verbose", is_flag=True, help="Also a line for every finished individual.")
@click.option("--no-wait", is_flag=True,
              help="Exit (code 2) if RUN_DIR is no Atoll run yet, instead of waiting for its "
                   "job to begin (e.g. a job still pending after sbatch).")
@click.option("--after", default=0.0, hidden=True, help="Follow the first job starting then.")
@click.option("--parent", default=0, hidden=True, help="End when this process is gone.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def watch(run_dir: Path, interval: float, plain: bool, verbose: bool, no_wait: bool,
          after: float, parent: int, debug: bool) -> None:
    """Follow a running search from another shell (reads its flushed files, no locks): done of
    the budget, rate, failures, best loss with its main metric, ETA. Ends when the job does.
    Started before the job creates the run (right after sbatch), it waits for the run.

    \b
    Example (on a login node, while the job runs):
      atoll watch runs/sphere
    """
    _read_without_locks()
    from atoll.views.progress import follow

    live = sys.stdout.isatty() and not plain
    try:
        _guarded(lambda: follow(run_dir, interval=interval, live=live, each=verbose,
                                after=after, parent=parent, wait=not (no_wait or parent)), debug)
    except KeyboardInterrupt:  # Ctrl-C is how one stops watching (its waiting line says so)
        pass


@cli.command()
@click.argument("run_dir", type=RunDir())
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def consolidate(run_dir: Path, debug: bool) -> None:
    """Write RUN_DIR/results.h5 from the run's files now, for a killed or running run, without
    resuming it (reads files only: no MPI, no torch).

    A killed job's worker files stay marked as open for writing (HDF5's SWMR), so h5ls and a
    plain h5py.File refuse them; results.h5 holds every row flushed so far in plain tables. A
    running job writes it again when it ends.

    \b
    Example:
      atoll consolidate runs/sphere
    """
    _read_without_locks()  # results.h5 is built in memory and moved in place
    from atoll.collective import one_line
    from atoll.errors import RecordError, suggested
    from atoll.record import RunPaths, writing_results
    from atoll.record import consolidate as write_results

    def write() -> Path:
        if run_dir.is_file():
            raise RecordError(f"{run_dir}: is a file; give the run's directory: "
                              f"{suggested('atoll', 'consolidate', run_dir.parent)}")
        try:
            paths = RunPaths(run_dir)
            with writing_results(paths):
                return write_results(paths)
        except OSError as exc:  # a read-only or foreign run directory
            raise RecordError(f"{one_line(exc)}: results.h5 not written; make {run_dir} "
                              "writable, or copy the run elsewhere and consolidate the copy"
                              ) from None

    target = _guarded(write, debug)
    click.echo(f"{target}: written from the run's files (nothing resumed); read it with "
               "h5py.File(path) or h5ls -r")


@cli.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="TOML config file of the search to check. Without it, the embedded default.")
@click.option("--run-dir", type=click.Path(path_type=Path),
              help="The search's run directory: checks it as the search would (new, or the "
                   "same search with budget left), and HDF5 locking and free space there.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a config key, as for 'atoll search' (repeatable).")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def doctor(config_path: Path | None, run_dir: Path | None, overrides: Sequence[str],
           debug: bool) -> None:
    """Check an allocation before a search: launch it exactly like the search.

    Checks what the search checks before it starts (the run directory: new, or the same search
    with budget left; the objective's import on every rank and its preflight; the rank layout;
    for torchrun as the command, one rank of each worker per node), failing with the line the
    search would print; then the MPI ranks and hosts, each worker's torch process group (built,
    with a timed all_reduce), the GPU of every rank (for a command objective: the GPUs each
    worker's commands see), HDF5 locking and free space in the run directory. Rank 0 prints a
    table. Exit codes: 0 ready (warnings allowed), 2 a check failed (the search would fail
    here) or bad input; the same on every rank.

    \b
    Example (with fewer cores than ranks, as on a laptop: add --oversubscribe):
      mpirun -n 4 atoll doctor --config examples/sphere.toml --run-dir runs/sphere \\
          --set search.ranks_per_worker=2
    """
    from atoll.config import load_config
    from atoll.job.doctor import run_doctor
    from atoll.logs import launcher_rank, setup_logging

    setup_logging(launcher_rank(), debug)
    config = _guarded(lambda: load_config(config_path, overrides), debug)
    report = _guarded(lambda: _mpi_job(lambda comm: run_doctor(config, run_dir, comm)), debug)
    if report.text:
        click.echo(report.text)
        if report.refusal:
            click.echo(f"atoll: error: {report.refusal}", err=True)
    sys.exit(report.exit_code)


@cli.command()
@click.argument("run_dir", type=RunDir())
@click.option("--out", type=click.Path(path_type=Path),
              help="Directory for report.html, the plots and exports [default: RUN_DIR/report].")
@click.option("--csv", "csv_files", is_flag=True,
              help="Also write individuals.csv and epochs.csv.")
@click.option("--json", "json_files", is_flag=True,
              help="Also write individuals.json and epochs.json (lists of records).")
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=1),
              help="Best individuals to list and to draw epoch curves of.")
@click.option("--no-plots", is_flag=True,
              help="Tables and exports only (no matplotlib needed).")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def report(run_dir: Path, out: Path | None, csv_files: bool, json_files: bool, top: int,
           no_plots: bool, debug: bool) -> None:
    """Write a report of a run: tables, PNG plots and one HTML page (reads files only).

    Works on a finished, running or killed run, without MPI, torch or a GPU. The plots need
    matplotlib: pip install 'atoll[report]'.

    \b
    Example:
      atoll report runs/sphere --csv --json
    """
    _read_without_locks()
    from atoll.views.report import run_report

    click.echo(_guarded(lambda: run_report(run_dir, out, top=top, csv_files=csv_files,
                                           json_files=json_files, plots=not no_plots), debug))


def main() -> None:
    """The command line (``atoll.__main__`` catches stop signals first): a usage error
    (unknown option, missing argument) is one line and exit code 2, like every other bad
    input, instead of click's usage block."""
    from atoll.logs import launcher_rank

    try:
        code = cli.main(prog_name="atoll", standalone_mode=False)
    except click.UsageError as exc:
        if isinstance(exc, getattr(click.exceptions, "NoArgsIsHelpError", ())):
            exc.show()  # plain `atoll`: the help text, as click prints it (click >= 8.2)
            sys.exit(exc.exit_code)
        where = exc.ctx.command_path if exc.ctx is not None else "atoll"
        message = exc.format_message().rstrip(".")
        see = " See" if message.endswith("?") else "; see"  # after "Did you mean 'x'?"
        _fail(f"{message}{see} '{where} --help'", launcher_rank())
    except click.Abort:  # Ctrl-C at a click prompt (none today); keep click's exit code
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
