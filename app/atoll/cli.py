"""The ``atoll`` command line. Commands are thin: parse, build a config, call the library.

Only what a command needs is imported inside it: ``atoll --help`` and the commands that only
read files never import torch or start MPI.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import click

from atoll import __version__

EXIT_BAD_INPUT = 2


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
    2 bad input (config, search space, rank layout, run directory), 75 stopped early by a
    signal (SIGTERM, SIGUSR1, SIGINT) or the wall time: resume to continue.
    """


@cli.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="TOML config file. Without it, the embedded default search runs.")
@click.option("--run-dir", required=True, type=click.Path(path_type=Path),
              help="Directory for the run's HDF5 record (new or empty).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a config key, e.g. --set search.islands=2 (repeatable).")
@click.option("--top", default=5, show_default=True, help="Best individuals to list at the end.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def search(config_path: Path | None, run_dir: Path, overrides: Sequence[str], top: int,
           debug: bool) -> None:
    """Start a search recorded in RUN_DIR (or continue it, if RUN_DIR holds the same search).

    \b
    Examples:
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
    _finish(_guarded(lambda: _mpi_job(
        lambda comm: run_search(config, run_dir, comm, config_text=text)), debug), top)


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
    from atoll.logs import launcher_rank
    from atoll.record import open_run
    from atoll.views.inspect import describe

    if launcher_rank() == 0:
        click.echo(describe(open_run(summary.run_dir), top=top))
        rate = summary.evaluations / summary.wall_seconds if summary.wall_seconds else 0.0
        click.echo(f"\nThis job: {summary.evaluations} evaluations in "
                   f"{summary.wall_seconds:.2f} s ({rate:.1f}/s); results: "
                   f"{summary.results_file}")
        if summary.exit_code:
            click.echo(f"Stopped before the budget was spent: continue with "
                       f"'atoll resume {summary.run_dir}' (exit code {summary.exit_code}).")
    sys.exit(summary.exit_code)


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Change a job-level setting for this job only: search.ranks_per_worker, "
                   "search.islands, search.wall_time or record.flush_interval.")
@click.option("--top", default=5, show_default=True, help="Best individuals to list at the end.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def resume(run_dir: Path, overrides: Sequence[str], top: int, debug: bool) -> None:
    """Continue the run in RUN_DIR until its budget is spent, under any rank layout.

    \b
    Example (a requeued job with another allocation):
      mpirun -n 8 atoll resume runs/sphere --set search.islands=4
    """
    from atoll.job.runner import resume_search
    from atoll.logs import launcher_rank, setup_logging

    setup_logging(launcher_rank(), debug)
    _finish(_guarded(lambda: _mpi_job(lambda comm: resume_search(run_dir, comm, overrides)),
                     debug), top)


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--top", default=10, show_default=True, help="Best individuals to list.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def inspect(run_dir: Path, top: int, debug: bool) -> None:
    """Print a run's metadata, counts by status and best individuals (reads files only)."""
    from atoll.record import open_run
    from atoll.views.inspect import describe

    click.echo(_guarded(lambda: describe(open_run(run_dir), top=top), debug))


@cli.command()
@click.argument("run_dir", type=click.Path(path_type=Path))
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
    from atoll.views.report import run_report

    click.echo(_guarded(lambda: run_report(run_dir, out, top=top, csv_files=csv_files,
                                           json_files=json_files, plots=not no_plots), debug))


def main() -> None:
    """The ``atoll`` entry point: a usage error (unknown option, missing argument) is one line
    and exit code 2, like every other bad input, instead of click's usage block."""
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


if __name__ == "__main__":
    main()
