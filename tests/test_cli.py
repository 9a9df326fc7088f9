"""The command line as users run it: real subprocesses, exit codes, messages, imports."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

import atoll
from atoll.individual import Status
from atoll.record import open_run
from conftest import BIN, ROOT, atoll_cmd, kill_tree, mpi_env, mpirun_atoll, mpirun_cmd, run


def imported_modules(*args: str) -> set[str]:
    """Modules a CLI call imports, from ``python -X importtime``."""
    done = run([sys.executable, "-X", "importtime", "-m", "atoll", *args])
    return {line.split("|")[-1].strip().split(".")[0]
            for line in done.stderr.splitlines() if line.startswith("import time:")}


def test_version_and_help():
    done = run(atoll_cmd("--version"))
    assert done.returncode == 0 and atoll.__version__ in done.stdout
    for command in ([], ["search"], ["resume"], ["inspect"]):
        done = run(atoll_cmd(*command, "--help"))
        assert done.returncode == 0 and "Usage: atoll" in done.stdout


def test_help_names_every_exit_code():
    from atoll import exit_codes

    shown = " ".join(run(atoll_cmd("--help")).stdout.split())
    codes = sorted({v for k, v in vars(exit_codes).items() if k.startswith("EXIT_")})
    assert [c for c in codes if not re.search(rf"(?<![\d.]){c}(?![\d.])", shown)] == []


USAGE_ERRORS = [
    (["search", "--config", "examples/sphere.toml"],
     "atoll: error: Missing option '--run-dir'; see 'atoll search --help'"),
    (["search", "--bogus"], "atoll: error: No such option '--bogus'. Did you mean '--verbose'? "
                            "See 'atoll search --help'"),
    (["inspect", "x", "--zzz"], "atoll: error: No such option '--zzz'; see 'atoll inspect --help'"),
    (["serch"], "atoll: error: No such command 'serch'. Did you mean 'search'? See "
                "'atoll --help'"),
    (["inspect"], "atoll: error: Missing argument 'RUN_DIR'; see 'atoll inspect --help'"),
    (["search", "--run-dir", ""],  # would have been the current directory
     "atoll: error: Invalid value for '--run-dir': is empty; give the run's directory, e.g. "
     "runs/sphere; see 'atoll search --help'"),
    (["resume", " "], "atoll: error: Invalid value for 'RUN_DIR': is empty; give the run's "
                      "directory, e.g. runs/sphere; see 'atoll resume --help'"),
    (["search", "--run-dir", "r", "--top", "x"],
     "atoll: error: Invalid value for '--top': 'x' is not a valid integer range; "
     "see 'atoll search --help'"),
    (["inspect", "x", "--top", "-3"],  # was "Best: none yet" on a finished run
     "atoll: error: Invalid value for '--top': -3 is not in the range x>=0; "
     "see 'atoll inspect --help'"),
]


@pytest.mark.parametrize(("args", "line"), USAGE_ERRORS)
def test_usage_errors_are_one_line_and_exit_2(args, line, tmp_path):
    done = run(atoll_cmd(*args), cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_the_record_is_reachable_after_import_atoll(tmp_path):
    """`import atoll` then `atoll.record.open_run(...)`, as the README shows (an
    AttributeError once)."""
    code = ("import sys, atoll\n"
            "try:\n"
            "    atoll.record.open_run(sys.argv[1])\n"
            "except Exception as exc:\n"
            "    print('read:', type(exc).__name__, exc)\n")
    done = run([sys.executable, "-c", code, str(tmp_path / "none")])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("read: RecordError ") and "no such file or directory" \
        in done.stdout, done.stdout


def test_bare_atoll_shows_the_help():
    done = run(atoll_cmd())
    assert done.returncode in (0, 2)  # click < 8.2 exits 0 here, later ones 2
    assert "Usage: atoll [OPTIONS] COMMAND" in done.stdout + done.stderr


def test_help_imports_neither_torch_nor_mpi_nor_h5py():
    modules = imported_modules("--help")
    assert not modules & {"torch", "mpi4py", "h5py", "numpy"}, modules


def test_benchmark_search_never_imports_torch(tmp_path):
    modules = imported_modules("search", "--config", "examples/sphere.toml", "--run-dir",
                               str(tmp_path / "r"), "--set", "search.generations=3")
    assert "mpi4py" in modules and "h5py" in modules
    assert "torch" not in modules


def test_inspect_reads_files_without_mpi(tmp_path):
    run_dir = tmp_path / "r"
    assert run(atoll_cmd("search", "--config", "examples/sphere.toml", "--run-dir",
                         str(run_dir), "--set", "search.generations=4", "--set",
                         "search.islands=1")).returncode == 0
    done = run(atoll_cmd("inspect", str(run_dir)))
    assert done.returncode == 0 and "Evaluations: 4 (ok 4" in done.stdout
    assert "mpi4py" not in imported_modules("inspect", str(run_dir))
    # its results.h5 given as a file: read as given, and said to be the copy it is
    done = run(atoll_cmd("inspect", str(run_dir / "results.h5")))
    assert done.returncode == 0 and "Evaluations: 4 (ok 4" in done.stdout
    assert ("Read from results.h5 as given (its run directory's worker files may hold newer "
            "rows: give the directory to read them)") in done.stdout


BAD_CONFIGS = [
    ("[search]\ngenerations = 0\n", "search.generations: expected an integer >= 1, got 0"),
    ("[search]\nislands = 'two'\n", "search.islands: expected an integer >= 1"),
    ("[evolution]\ncrosover = 0.5\n", "did you mean 'crossover'"),
    ("[space.x]\ntype = 'float'\nlow = 2\nhigh = 1\n", "space.x"),
    ("[space.x]\ntype = 'float'\nlow = 0\nhigh = 1\nlog = true\n", "log"),
    ("[space.c]\ntype = 'categorical'\nchoices = []\n", "space.c.choices"),
    ("[search\n", "invalid TOML"),
    ("[objective]\nname = 'nowhere.module:f'\n[space.x]\ntype = 'int'\nlow = 0\nhigh = 3\n",
     "cannot import module 'nowhere.module'"),
    ("[objective]\nname = 'json:__doc__'\n[space.x]\ntype = 'int'\nlow = 0\nhigh = 3\n",
     "not a function"),
]


@pytest.mark.parametrize("text,words", BAD_CONFIGS)
def test_bad_config_gives_one_line_exit_2_and_creates_nothing(tmp_path, text, words):
    config = tmp_path / "bad.toml"
    config.write_text(text)
    run_dir = tmp_path / "run"
    done = run(atoll_cmd("search", "--config", str(config), "--run-dir", str(run_dir)))
    assert done.returncode == 2
    assert done.stderr.startswith("atoll: error: ") and words in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert not run_dir.exists()


def test_layout_that_does_not_fit_fails_on_every_rank_with_one_message(tmp_path):
    run_dir = tmp_path / "run"
    done = mpirun_atoll(3, "search", "--config", "examples/sphere.toml", "--run-dir",
                        str(run_dir), "--set", "search.ranks_per_worker=2")
    assert done.returncode != 0
    assert done.stderr.count("atoll: error: 3 MPI ranks cannot form workers") == 1
    assert not run_dir.exists()


def test_more_islands_than_workers_run_as_one_island_per_worker_with_one_warning(tmp_path):
    done = mpirun_atoll(4, "search", "--config", "examples/sphere.toml", "--run-dir",
                        str(tmp_path / "r"), "--set", "search.islands=9",
                        "--set", "search.generations=3")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("search.islands=9 is more than the 4 worker(s) of this job") == 1
    assert "running 4 island(s)" in done.stderr
    layout = json.loads(open_run(tmp_path / "r").jobs["layout"][0])
    assert layout["islands"] == 4 and layout["workers"] == 4


def test_foreign_run_directory_is_left_alone(tmp_path):
    run_dir = tmp_path / "data"
    run_dir.mkdir()
    (run_dir / "keep.txt").write_text("precious")
    done = run(atoll_cmd("search", "--config", "examples/sphere.toml", "--run-dir",
                         str(run_dir)))
    assert done.returncode == 2 and "not an Atoll run" in done.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == ["keep.txt"]


def test_python_api_inside_a_user_script(tmp_path):
    script = tmp_path / "mine.py"
    script.write_text(
        "import atoll, sys\n"
        "config = atoll.load_config('examples/rastrigin.toml', ['search.generations=10'])\n"
        "summary = atoll.search(config, sys.argv[1])\n"
        "again = atoll.search(config, sys.argv[1] + '-again')\n"
        "print('evaluations', summary.evaluations, again.evaluations)\n")
    done = run(mpirun_cmd(2, str(script), str(tmp_path / "r")))
    assert done.returncode == 0, done.stderr
    assert "evaluations 20 20" in done.stdout  # the API may be called more than once
    done = run(mpirun_cmd(2, str(script), str(tmp_path / "r")))  # both runs' budgets spent
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("the run's budget is spent") == 2, done.stderr  # rank 0's only


TRAINING_EXAMPLES = {"digits.toml", "ddp_user.toml"}  # run with small budgets in test_classifier


@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").glob("*.toml")
                                           if p.name not in TRAINING_EXAMPLES))
def test_every_search_example_runs_on_4_ranks_in_minutes(tmp_path, example):
    # command.toml starts a torch script per rank and evaluation: about a minute here idle
    limit = 180 if example == "command.toml" else 60
    done = mpirun_atoll(4, "search", "--config", f"examples/{example}", "--run-dir",
                        str(tmp_path / "r"), timeout=limit)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(r"^Best \d+ of \d+", done.stdout, re.M), done.stdout[-2000:]


def test_make_targets_resolve_to_the_commands_the_readme_names():
    """make -n: each target the README names exists and runs what it says (nothing is run)."""
    planned = {target: run(["make", "-n", "-W", "pyproject.toml", target], timeout=60)
               for target in ("run", "test", "test-slow", "bench", "bench-full", "bench-training",
                              "lint", "clean")}
    for target, done in planned.items():
        assert done.returncode == 0, (target, done.stderr)
    assert "atoll search --run-dir" in planned["run"].stdout
    assert '-m pytest -q -m "not slow" || [ $? -eq 5 ]\n' in planned["test"].stdout
    assert "-m pytest -q -m slow || [ $? -eq 5 ]\n" in planned["test-slow"].stdout
    assert "benchmarks/run.py\n" in planned["bench"].stdout
    assert ("benchmarks/run.py --only peers --peers full --output benchmarks/RESULTS-full.md "
            "--cache benchmarks/searches\n") in planned["bench-full"].stdout
    assert ("benchmarks/run.py --only training_reuse,training_ray,fidelity_ray --output "
            "benchmarks/RESULTS-training.md") \
        in planned["bench-training"].stdout


def test_an_objective_module_beside_the_config_needs_no_pythonpath(tmp_path):
    """As `python script.py` users expect: the module next to the config file is found."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "my_objective.py").write_text(
        "def f(params, ctx):\n    return (params['x'] - 0.25) ** 2\n")
    (folder / "search.toml").write_text(
        "[objective]\nname = 'my_objective:f'\n[space.x]\ntype = 'float'\nlow = 0\nhigh = 1\n"
        "[search]\ngenerations = 4\n")
    env = {k: v for k, v in mpi_env().items() if k != "PYTHONPATH"}
    done = run([str(BIN / "atoll"), "search", "--config", str(folder / "search.toml"),
                "--run-dir", str(tmp_path / "r"), "-q"], cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert len(open_run(tmp_path / "r").individuals) == 4
    # and from the current directory, with the config elsewhere
    (tmp_path / "elsewhere.toml").write_text((folder / "search.toml").read_text())
    done = run([str(BIN / "atoll"), "search", "--config", str(tmp_path / "elsewhere.toml"),
                "--run-dir", str(tmp_path / "r2"), "-q"], cwd=folder, env=env)
    assert done.returncode == 0, done.stderr


def test_toml_dates_in_options_reach_the_objective_as_text_and_a_rerun_continues(tmp_path):
    """The record keeps the config as JSON, which has no dates: a date reaches ctx.options as
    ISO 8601 text, the same in the first run and in a rerun of the same file (once refused as
    a different search)."""
    config = tmp_path / "dated.toml"
    config.write_text('[objective]\nname = "objectives:slow_sphere"\n'
                      "[objective.options]\nsleep = 0.0\nsnapshot = 2026-11-23\n"
                      "at = 2026-11-23T10:00:00Z\n"
                      '[space.x0]\ntype = "float"\nlow = -1.0\nhigh = 1.0\n'
                      "[search]\ngenerations = 3\n")
    run_dir = tmp_path / "run"
    for _ in range(2):
        done = run(atoll_cmd("search", "--config", str(config), "--run-dir", str(run_dir), "-q"))
        assert done.returncode == 0, done.stderr
    options = open_run(run_dir).config_table["objective"]["options"]
    assert options["snapshot"] == "2026-11-23"
    assert options["at"] == "2026-11-23T10:00:00+00:00"
    assert atoll.load_config(config).objective.options["snapshot"] == "2026-11-23"


def test_inspect_metric_shows_the_named_metric_and_refuses_an_unknown_one(tmp_path):
    run_dir = tmp_path / "run"
    done = run(atoll_cmd("search", "--config", "tests/configs/report.toml", "--run-dir",
                         str(run_dir), "-q", "--set", "search.generations=6"), env=mpi_env())
    assert done.returncode == 0, done.stderr[-2000:]
    shown = run(atoll_cmd("inspect", str(run_dir), "--metric", "val_loss"), env=mpi_env())
    header = next(line for line in shown.stdout.splitlines() if line.strip().startswith("id "))
    assert header.split()[:3] == ["id", "loss", "val_loss"], shown.stdout
    default = run(atoll_cmd("inspect", str(run_dir)), env=mpi_env())
    assert " val_accuracy " in default.stdout  # the objective's own choice
    unknown = run(atoll_cmd("inspect", str(run_dir), "--metric", "nope"), env=mpi_env())
    assert (unknown.returncode, unknown.stdout) == (2, "")
    assert unknown.stderr == ("atoll: error: --metric nope: the run reported no such metric "
                              "(it has val_loss, val_accuracy)\n")


def test_a_killed_run_consolidated_for_plain_h5py_then_resumed_shows_as_killed(tmp_path):
    run_dir = tmp_path / "killed run"
    search = subprocess.Popen(
        mpirun_cmd(2, "-m", "atoll", "search", "--config", "tests/configs/slow_sphere.toml",
                   "--run-dir", str(run_dir), "-q", "--set", "search.generations=400",
                   "--set", "record.flush_interval=0.2"),
        cwd=ROOT, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True)
    try:
        while not (run_dir / "run.h5").exists() or len(open_run(run_dir).individuals) < 10:
            assert search.poll() is None, search.communicate()[1][-2000:]
            time.sleep(0.2)
    finally:
        kill_tree(search)
    worker = next((run_dir / "workers").iterdir())
    with pytest.raises(OSError):
        h5py.File(worker, "r")  # the killed job's file is still marked as open for writing
    flushed = len(open_run(run_dir).individuals)

    done = run(atoll_cmd("consolidate", str(run_dir)))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (f"{run_dir / 'results.h5'}: written from the run's files (nothing "
                           "resumed); read it with h5py.File(path) or h5ls -r\n")
    with h5py.File(run_dir / "results.h5") as f:
        assert len(f["individuals"]) == flushed
        assert f["jobs"]["exit_code"].tolist() == [-1]  # the killed job, not resumed
    assert open_run(run_dir).jobs["exit_code"].tolist() == [-1]  # no job was started
    bad = run(atoll_cmd("consolidate", str(tmp_path)))
    assert bad.returncode == 2 and bad.stderr.startswith("atoll: error: ")
    assert len(bad.stderr.splitlines()) == 1

    # a later job ran: inspect no longer calls the killed one (nor its file) "running"
    status = open_run(run_dir).individuals["status"]
    budget = int(np.count_nonzero(status != Status.INTERRUPTED)) + 2
    assert run(atoll_cmd("resume", str(run_dir), "-q", "--set",
                         f"search.evaluations={budget}")).returncode == 0
    shown = run(atoll_cmd("inspect", str(run_dir))).stdout
    assert "-> killed (no end recorded);" in shown and "running or killed" not in shown, shown
    assert "2 of 3 worker files not closed: their jobs were killed" in shown, shown
    assert "a job is running" not in shown, shown


def test_suggested_commands_paste_into_a_shell_with_a_space_in_the_run_directory(tmp_path):
    run_dir = tmp_path / "my runs" / "it's here"
    args = ("--config", "examples/sphere.toml", "--run-dir", str(run_dir), "-q",
            "--set", "search.generations=3", "--set", "search.islands=1")
    assert run(atoll_cmd("search", *args)).returncode == 0
    again = run(atoll_cmd("search", *args))  # the budget is spent: it suggests extending it
    assert again.returncode == 0, again.stderr
    line = next(x for x in again.stdout.splitlines() if x.startswith("No job ran"))
    pasted = line.split("To extend it: ", 1)[1].rsplit(" with N", 1)[0][1:-1]
    env = mpi_env(PATH=f"{BIN}:{mpi_env()['PATH']}")
    done = subprocess.run(["bash", "-c", pasted.replace("=N", "=5")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (pasted, done.stderr)
    assert len(open_run(run_dir).individuals) == 5


def test_the_readers_open_files_another_program_locks_though_the_job_asks_for_locks(tmp_path):
    """The jobscripts and the image set HDF5_USE_FILE_LOCKING=BEST_EFFORT, which overrides
    h5py's locking=False; Atoll's readers run without locks anyway (a lock they took would
    hold off a worker's writer), so a file another program locks does not stop them."""
    run_dir = tmp_path / "r"
    assert run(atoll_cmd("search", "--config", "examples/sphere.toml", "--run-dir",
                         str(run_dir), "-q", "--set", "search.generations=4", "--set",
                         "search.islands=1")).returncode == 0
    files = sorted(str(p) for p in run_dir.rglob("*.h5"))
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         "held = [open(p, 'rb') for p in sys.argv[1:]]\n"
         "for f in held: fcntl.flock(f, fcntl.LOCK_EX)\n"
         "print('held', flush=True)\ntime.sleep(600)\n", *files], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        env = mpi_env(HDF5_USE_FILE_LOCKING="BEST_EFFORT")
        plain = run([sys.executable, "-c", "import h5py, sys; h5py.File(sys.argv[1], 'r', "
                     "locking=False)", files[0]], env=env)
        assert plain.returncode != 0 and "unable to lock file" in plain.stderr  # it does lock
        for args in (("inspect",), ("watch", "--plain", "--no-wait"),
                     ("report", "--no-plots", "--out", str(tmp_path / "report")),
                     ("consolidate",)):
            done = run(atoll_cmd(*args[:1], str(run_dir), *args[1:]), env=env)
            assert done.returncode == 0 and not done.stderr, (args, done.stderr)
    finally:
        kill_tree(holder)
