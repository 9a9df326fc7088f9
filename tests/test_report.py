"""``atoll report`` on real recorded runs: real mpirun searches, real subprocesses, real files."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import math
import os
import shlex
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from matplotlib.collections import LineCollection

from atoll.errors import RecordError
from atoll.record import SCHEMA_VERSION, open_run
from conftest import ROOT, atoll_cmd, kill_tree, mpi_env, mpirun_cmd, run

# The worktree's package first: the venv's editable install may point at another checkout.
ENV = mpi_env(PYTHONPATH=os.pathsep.join([str(ROOT / "app"), str(ROOT / "tests"), str(ROOT)]))
CONFIG = "tests/configs/report.toml"
PLOTS = ("best_loss.png", "epochs.png", "intermediate.png", "importance.png", "parameters.png",
         "parallel.png", "timeline.png")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def report(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run(atoll_cmd("report", *args), timeout=120, env=env or ENV)


def search(run_dir: Path, *settings: str, ranks: int = 2) -> None:
    args = ["-m", "atoll", "search", "--config", CONFIG, "--run-dir", str(run_dir)]
    for item in settings:
        args += ["--set", item]
    done = run(mpirun_cmd(ranks, *args), env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[Path, subprocess.CompletedProcess[str], set[str]]:
    """A real 2-rank search (48 evaluations, some failing, 3 epochs each), reported once with
    every export; the modules that report imported, from ``python -X importtime``."""
    run_dir = tmp_path_factory.mktemp("report") / "run"
    search(run_dir)
    done = run([sys.executable, "-X", "importtime", "-m", "atoll", "report", str(run_dir),
                "--csv", "--json", "--top", "5"], timeout=120, env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    modules = {line.split("|")[-1].strip().split(".")[0]
               for line in done.stderr.splitlines() if line.startswith("import time:")}
    return run_dir, done, modules


def h5_table(run_dir: Path, name: str) -> np.ndarray:
    """A table of results.h5 read with nothing but h5py (its committed rows)."""
    with h5py.File(run_dir / "results.h5", "r") as f:
        table = f[name]
        return table[: int(table.attrs["rows"])]


def expected(table: np.ndarray, column: str, value: Any) -> Any:
    """What an export should hold for one HDF5 cell: enum names, text, Python numbers."""
    enum = h5py.check_enum_dtype(table.dtype[column])
    if enum:
        return {code: name for name, code in enum.items()}[int(value)]
    if isinstance(value, bytes):
        return value.decode()
    return value.item() if isinstance(value, np.generic) else value


def same(exported: Any, wanted: Any) -> bool:
    if isinstance(wanted, float):
        if math.isnan(wanted):
            return exported is None or (isinstance(exported, float) and math.isnan(exported))
        return float(exported) == wanted
    return exported == wanted


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    assert data[12:16] == b"IHDR", path
    return struct.unpack(">II", data[16:24])


def digest(path: Path) -> dict[str, str]:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


# -- the report of a finished run --------------------------------------------------------------
def test_report_prints_counts_failure_reasons_and_the_best(finished):
    run_dir, done, _ = finished
    ind = h5_table(run_dir, "individuals")
    status = ind["status"]
    failed = int(np.count_nonzero(status == 1))
    ok = int(np.count_nonzero(status == 0))
    assert 0 < failed < len(ind) == 48
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"Report of {run_dir} (record schema {SCHEMA_VERSION}")
    assert lines[1] == f"Evaluations: 48 (ok {ok}, failed {failed}, pruned 0, interrupted 0, " \
                        "paused 0)"
    assert f"  {failed:6d}  ValueError: report_demo failed on purpose" in lines
    head = lines.index(f"Best 5 of {ok} ok:") + 1
    assert lines[head].split() == ["id", "loss", "val_accuracy", "best", "epoch", "epochs",
                                   "duration", "(s)", "island", "lr", "layers", "act"]
    best = np.argsort(np.where(status == 0, ind["loss"], np.inf), kind="stable")[:5]
    rows = [line.split() for line in lines[head + 1: head + 6]]
    assert [int(r[0]) for r in rows] == [int(i) for i in ind["id"][best]]
    epochs = h5_table(run_dir, "epochs")
    for row in rows:  # the best epoch is the one of lowest val_loss; its accuracy is shown
        mine = epochs[epochs["individual"] == int(row[0])]
        top = mine[np.argmin(mine["val_loss"])]
        assert float(row[2]) == pytest.approx(float(top["val_accuracy"]), rel=1e-3)
        assert (int(row[3]), int(row[4])) == (int(top["epoch"]), len(mine))
    assert lines[-1].startswith(f"Wrote {run_dir / 'report'}/: report.html, individuals.csv")


def test_every_plot_is_a_png_of_sensible_size(finished):
    out = finished[0] / "report"
    for name in PLOTS:
        width, height = png_size(out / name)
        assert 600 <= width <= 2500 and 250 <= height <= 2500, (name, width, height)
        assert (out / name).stat().st_size > 10_000, name  # drawn, not an empty canvas
    assert "Skipped" not in finished[1].stdout


@pytest.mark.parametrize("name", ["individuals", "epochs"])
def test_csv_matches_the_hdf5_table_row_for_row(finished, name):
    table = h5_table(finished[0], name)
    with open(finished[0] / "report" / f"{name}.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == list(table.dtype.names)
    assert len(rows) - 1 == len(table) > 0
    for record, line in zip(table, rows[1:], strict=True):
        for column, text in zip(table.dtype.names, line, strict=True):
            wanted = expected(table, column, record[column])
            got = text if isinstance(wanted, str) else \
                (float(text) if isinstance(wanted, float) else int(text))
            assert same(got, wanted), (name, column, text, wanted)
    if name == "individuals":  # enums as names, errors with their text
        assert {r[rows[0].index("status")] for r in rows[1:]} == {"ok", "failed"}


@pytest.mark.parametrize("name", ["individuals", "epochs"])
def test_json_is_a_list_of_records_matching_the_hdf5_table(finished, name):
    table = h5_table(finished[0], name)
    records = json.loads((finished[0] / "report" / f"{name}.json").read_text())
    assert isinstance(records, list) and len(records) == len(table) > 0
    for record, exported in zip(table, records, strict=True):
        assert list(exported) == list(table.dtype.names)
        for column in table.dtype.names:
            assert same(exported[column], expected(table, column, record[column])), column


class PageParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.tags: list[str] = []
        self.links: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for key, value in attrs:
            if key == "src" and tag == "img":
                self.images.append(value or "")
            elif key in ("src", "href"):
                self.links.append(value or "")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_html_page_parses_and_embeds_every_plot(finished):
    run_dir = finished[0]
    out = run_dir / "report"
    parser = PageParser()
    parser.feed((out / "report.html").read_text(encoding="utf-8"))
    parser.close()
    assert parser.links == [] and "script" not in parser.tags and "link" not in parser.tags
    prefix = "data:image/png;base64,"
    assert len(parser.images) == len(PLOTS)
    assert all(src.startswith(prefix) for src in parser.images)
    embedded = {base64.b64decode(src[len(prefix):]) for src in parser.images}
    assert embedded == {(out / name).read_bytes() for name in PLOTS}
    text = " ".join(parser.text)
    assert "ValueError: report_demo failed on purpose" in text
    assert parser.tags.count("table") == 3  # statuses, failure reasons, the best
    ind = h5_table(run_dir, "individuals")
    best = int(ind["id"][np.argmin(np.where(ind["status"] == 0, ind["loss"], np.inf))])
    page = (out / "report.html").read_text(encoding="utf-8")
    top = page.index("<h2>Best 5 of ")
    assert page.index(f"<tr><td>{best}</td>", top) < page.index("</table>", top)


def test_html_page_renders_in_headless_chromium(finished, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed: the page was only parsed, not rendered")
    from matplotlib.image import imread

    shot = tmp_path / "page.png"
    done = run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                "--window-size=1200,3000",
                (finished[0] / "report" / "report.html").resolve().as_uri()], timeout=120)
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    assert png_size(shot) == (1200, 3000)
    pixels = imread(shot)[..., :3]
    saturation = pixels.max(axis=2) - pixels.min(axis=2)
    # Text and tables are grey; the plots' colours show only if the embedded images decoded.
    assert np.count_nonzero(saturation > 0.3) > 5_000  # about 26,000 here; 150 if broken


def test_report_imports_neither_torch_nor_mpi4py(finished):
    modules = finished[2]
    assert "matplotlib" in modules and "h5py" in modules
    assert not modules & {"torch", "mpi4py"}, modules


# -- pruned and failed individuals, start-up, importances ---------------------------------------
@pytest.fixture(scope="module")
def pruned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 2-rank search of report_demo with the median rule on: ok, pruned and failed."""
    run_dir = tmp_path_factory.mktemp("pruned") / "run"
    search(run_dir, "pruning.rule=median", "pruning.min_completed=3")
    return run_dir


STATUS_NAMES = {0: "ok", 1: "failed", 2: "pruned", 3: "interrupted"}


def recorded_curves(run_dir: Path, metric: str) -> dict[str, list[list[tuple[float, float]]]]:
    """From the HDF5 tables alone: status -> the (epoch, metric) curve of each individual of
    that status that reported epochs, sorted."""
    ind = h5_table(run_dir, "individuals")
    epochs = h5_table(run_dir, "epochs")
    found: dict[str, list[list[tuple[float, float]]]] = {n: [] for n in STATUS_NAMES.values()}
    for row in ind:
        mine = epochs[epochs["individual"] == row["id"]]
        mine = mine[np.argsort(mine["epoch"])]
        if len(mine):
            found[STATUS_NAMES[int(row["status"])]].append(
                [(float(e), float(v)) for e, v in zip(mine["epoch"], mine[metric], strict=True)])
    return {name: sorted(curves) for name, curves in found.items()}


def drawn_curves(ax: Any, status: str) -> list[list[tuple[float, float]]]:
    """The segments of the line collection labelled with ``status``, sorted."""
    found = [c for c in ax.collections if isinstance(c, LineCollection)
             and c.get_label().startswith(status)]
    assert len(found) <= 1, [c.get_label() for c in found]
    segments = found[0].get_segments() if found else []
    return sorted([(float(e), float(v)) for e, v in seg] for seg in segments)


def test_intermediate_values_draw_every_curve_by_status_pruned_ending_where_stopped(pruned):
    from atoll.views.plots.curves import intermediate_figure

    fig = intermediate_figure(open_run(pruned))
    recorded = recorded_curves(pruned, "val_loss")
    assert len(recorded["pruned"]) >= 3 and len(recorded["ok"]) >= 3
    for status, curves in recorded.items():
        assert drawn_curves(fig.axes[0], status) == curves, status
    # The x of each pruned curve sits at the epoch it was pruned at (report_demo goes on
    # reporting after it), on its curve.
    ind = h5_table(pruned, "individuals")
    epochs = h5_table(pruned, "epochs")
    marks = []
    for row in ind[ind["status"] == 2]:
        at = int(row["error"].decode().removeprefix("pruned at epoch "))
        mine = epochs[(epochs["individual"] == row["id"]) & (epochs["epoch"] == at)]
        marks.append((float(at), float(mine["val_loss"][0])))
    crosses = [c for c in fig.axes[0].collections if c.get_label() == "_stopped pruned"]
    assert sorted(map(tuple, np.asarray(crosses[0].get_offsets()).tolist())) == sorted(marks)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert f"pruned (x: where it was stopped): {len(recorded['pruned'])}" in labels
    assert f"ok: {len(recorded['ok'])}" in labels


def test_epochs_plot_draws_the_pruned_curves_behind_the_best(pruned):
    from atoll.views.plots.progress import epochs_figure

    fig = epochs_figure(open_run(pruned), 5)
    assert [ax.get_title() for ax in fig.axes] == ["val_loss", "val_accuracy"]
    for ax in fig.axes:
        recorded = recorded_curves(pruned, ax.get_title())
        assert drawn_curves(ax, "pruned") == recorded["pruned"] != []
        assert drawn_curves(ax, "ok") == []  # the best are drawn one by one, in colour


def test_parameter_plots_show_pruned_and_failed_apart_with_counts(pruned):
    from atoll.views.plots.parameters import parallel_figure, parameters_figure

    ind = h5_table(pruned, "individuals")
    counts = {name: int(np.count_nonzero(ind["status"] == code))
              for code, name in STATUS_NAMES.items()}
    assert counts["pruned"] > 0 and counts["failed"] > 0
    scatter = parameters_figure(open_run(pruned))
    labels = [t.get_text() for t in scatter.legends[0].get_texts()]
    assert f"pruned: {counts['pruned']} (hollow: the value when stopped)" in labels
    assert f"failed: {counts['failed']} (no result; in the band at the top)" in labels
    hollow = [c for c in scatter.axes[0].collections if c.get_label().startswith("pruned")]
    assert len(hollow[0].get_offsets()) == counts["pruned"]
    assert sorted(np.asarray(hollow[0].get_offsets())[:, 1]) == \
        pytest.approx(sorted(ind["loss"][ind["status"] == 2]))
    lines = parallel_figure(open_run(pruned))
    for status in ("pruned", "failed"):
        assert len(drawn_curves(lines.axes[0], status)) == counts[status]
    assert f"{counts['pruned']} pruned, {counts['failed']} failed" in lines.get_suptitle()


def test_timeline_counts_start_up_and_wind_down_apart_from_idle(pruned):
    from atoll.views.plots.timeline import worker_shares

    ind = h5_table(pruned, "individuals")
    job = h5_table(pruned, "jobs")[0]
    span = float(job["stop"] - job["start"])
    shares = worker_shares(open_run(pruned))
    assert sorted(shares) == sorted(int(w) for w in np.unique(ind["worker"]))
    for worker, part in shares.items():
        mine = ind[ind["worker"] == worker]
        start_up = float(mine["started"].min() - job["start"]) / span
        wind_down = float(job["stop"] - mine["finished"].max()) / span
        assert part["start-up"] == pytest.approx(start_up) and start_up > 0.01
        assert part["wind-down"] == pytest.approx(wind_down) and wind_down > 0
        assert part["busy"] + part["start-up"] + part["wind-down"] + part["idle"] == \
            pytest.approx(1.0)


def test_importances_sum_to_one_and_rank_the_only_parameter_that_matters_first(tmp_path):
    from atoll.views.plots.importance import importances

    run_dir = tmp_path / "lr_only"
    search(run_dir, "objective.name=objectives:lr_only")
    scores = importances(open_run(run_dir))
    assert sorted(scores) == ["act", "layers", "lr"]
    assert sum(scores.values()) == pytest.approx(1.0)
    assert list(scores)[0] == "lr" and scores["lr"] > 0.5, scores  # more than the rest together
    assert list(scores.values()) == sorted(scores.values(), reverse=True)
    done = without("sklearn", str(run_dir), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Skipped: Parameter importances (they need scikit-learn, which is not installed: " \
           "pip install scikit-learn)" in done.stdout.splitlines()
    assert (tmp_path / "out" / "parameters.png").is_file()
    assert not (tmp_path / "out" / "importance.png").exists()


# -- running and killed runs -------------------------------------------------------------------
@pytest.mark.slow  # a long search, killed part-way, reported at each stage
def test_report_of_a_running_then_killed_search(tmp_path):
    run_dir = tmp_path / "live"
    generations = 1500  # long enough to outlive the report on a busy machine; killed anyway
    args = ["-m", "atoll", "search", "--config", CONFIG, "--run-dir", str(run_dir),
            "--set", f"search.generations={generations}", "--set", "objective.options.sleep=0.02",
            "--set", "record.flush_interval=0.1"]
    proc = subprocess.Popen(mpirun_cmd(2, *args), cwd=ROOT, env=ENV, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        seen = 0
        while time.monotonic() < deadline and seen < 8:
            time.sleep(0.2)
            try:
                seen = len(open_run(run_dir).individuals)
            except RecordError:
                pass  # the files are being created
        assert seen >= 8, "the search recorded nothing within 60 s"
        done = report(str(run_dir), "--out", str(tmp_path / "running"))
        assert proc.poll() is None, "the search ended before the report ran"
    finally:
        kill_tree(proc)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "worker files not closed: a job is running or was killed" in done.stdout
    assert not (run_dir / "results.h5").exists()
    for name in PLOTS:
        png_size(tmp_path / "running" / name)
    killed = report(str(run_dir), "--out", str(tmp_path / "killed"), "--csv")
    assert killed.returncode == 0, killed.stderr[-2000:]
    text = (tmp_path / "killed" / "individuals.csv").read_text(encoding="utf-8")
    rows = list(csv.reader(text.splitlines(keepends=True)))
    assert seen <= len(rows) - 1 == len(open_run(run_dir).individuals) < 2 * generations


# -- bad input and missing matplotlib ----------------------------------------------------------
def bad_inputs(finished_dir: Path, tmp_path: Path) -> list[tuple[list[str], Path, str]]:
    """(arguments, what must stay untouched, words of the error) for each kind of bad input."""
    cases: list[tuple[list[str], Path, str]] = [
        ([str(tmp_path / "nowhere")], tmp_path / "nowhere", "no such file or directory")]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    cases.append(([str(foreign)], foreign, "not an Atoll run"))
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    data = (finished_dir / "results.h5").read_bytes()
    (damaged / "results.h5").write_bytes(data[: len(data) // 3])
    cases.append(([str(damaged)], damaged, "damaged"))
    worker = tmp_path / "worker"
    shutil.copytree(finished_dir, worker, ignore=shutil.ignore_patterns("report"))
    next(iter(sorted((worker / "workers").glob("*.h5")))).write_bytes(b"not hdf5 at all")
    cases.append(([str(worker)], worker, "job000-worker00000.h5"))
    good = tmp_path / "good"
    shutil.copytree(finished_dir, good, ignore=shutil.ignore_patterns("report"))
    taken = tmp_path / "taken.txt"
    taken.write_text("a file, not a directory")
    cases.append(([str(good), "--out", str(taken)], taken, "is a file, not a directory"))
    cases.append(([str(good), "--top", "0"], good, "Invalid value for '--top'"))
    return cases


def test_bad_input_is_one_line_exit_2_and_writes_nothing(finished, tmp_path):
    for args, untouched, words in bad_inputs(finished[0], tmp_path):
        before = digest(untouched) if untouched.exists() else None
        done = report(*args)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert done.stderr.startswith("atoll: error: ") and words in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
        assert done.stdout == ""
        assert (digest(untouched) if untouched.exists() else None) == before, args
        assert not (untouched / "report").exists()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (root only), unmounted when the test ends."""
    if os.geteuid() != 0:
        pytest.skip("a full file system needs root to mount a small tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()})")
    try:
        yield disk
    finally:
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def whole(path: Path, run_dir: Path) -> bool:
    """Whether a report file is complete: every row of its table, or a PNG up to its end."""
    if path.suffix == ".png":
        data = path.read_bytes()
        return data[:8] == PNG_SIGNATURE and data[-8:-4] == b"IEND"
    rows = len(h5_table(run_dir, path.stem))
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as handle:
            return len(list(csv.reader(handle))) == rows + 1
    if path.suffix == ".json":
        return len(json.loads(path.read_text(encoding="utf-8"))) == rows
    return path.read_text(encoding="utf-8").rstrip().endswith("</html>")


@pytest.mark.parametrize("first", ["csv", "png"])
def test_a_full_disk_leaves_no_partial_file(finished, small_disk, first):
    """The disk fills in the first CSV (a page left), or in the first PNG (nothing left)."""
    run_dir = finished[0]
    out = small_disk / "report"
    out.mkdir()
    free = 4096 if first == "csv" else 0
    with open(small_disk / "filler", "wb") as handle:
        os.posix_fallocate(handle.fileno(), 0, shutil.disk_usage(small_disk).free - free)
    done = report(str(run_dir), "--out", str(out), *(("--csv", "--json") if first == "csv" else ()))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == f"atoll: error: {out}: cannot write the report (No space left on " \
        "device); give a writable --out\n"
    left = sorted(out.iterdir())
    assert all(whole(p, run_dir) for p in left), [(p.name, p.stat().st_size) for p in left]


def without(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``atoll report`` in a Python where importing ``module`` fails, as where it is absent."""
    code = (f"import sys; sys.modules[{module!r}] = None; "
            f"sys.argv = ['atoll', 'report', *{list(args)!r}]; "
            "from atoll.cli import main; main()")
    return run([sys.executable, "-c", code], timeout=120, env=ENV)


def test_without_matplotlib_plots_are_refused_and_no_plots_still_reports(finished, tmp_path):
    out = tmp_path / "out"
    done = without("matplotlib", str(finished[0]), "--out", str(out))
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.strip().splitlines() == [
        "atoll: error: the plots need matplotlib, which is not installed: pip install "
        "'atoll[report]' (or pip install matplotlib), or pass --no-plots for the tables, CSV "
        "and JSON alone"]
    done = without("matplotlib", str(finished[0]), "--out", str(out), "--no-plots", "--csv")
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["epochs.csv", "individuals.csv",
                                                     "report.html"]
    parser = PageParser()
    parser.feed((out / "report.html").read_text(encoding="utf-8"))
    assert parser.images == [] and parser.tags.count("table") == 3


# -- the commands README.md and --help show ----------------------------------------------------
def shown_commands() -> list[str]:
    """Every ``atoll report`` line of README.md and of ``atoll report --help``."""
    readme = (ROOT / "README.md").read_text().splitlines()
    helped = report("--help").stdout.splitlines()
    return sorted({line.split("#")[0].strip() for line in readme + helped
                   if line.strip().startswith("atoll report ")})


def test_readme_and_help_commands_run_as_written(tmp_path):
    commands = shown_commands()
    assert commands, "README.md shows no atoll report command"
    runs = tmp_path / "runs"
    done = run(mpirun_cmd(2, "-m", "atoll", "search", "--config", "examples/sphere.toml",
                          "--run-dir", str(runs / "sphere"), "--set", "search.generations=20"),
               env=ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    for command in commands:
        words = shlex.split(command)
        done = run(atoll_cmd(*words[1:]), cwd=tmp_path, timeout=120, env=ENV)
        assert done.returncode == 0, (command, done.stderr[-2000:])
        assert (runs / "sphere" / "report" / "report.html").is_file()
