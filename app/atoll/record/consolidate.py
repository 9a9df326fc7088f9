"""``results.h5``: the whole run in single tables, readable with nothing but h5py or h5ls."""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from collections.abc import Iterator
from pathlib import Path

from atoll.record import full
from atoll.record._h5 import RESULTS_KIND, to_json, write_header
from atoll.record.paths import RunPaths
from atoll.record.reader import TABLES, open_run
from atoll.record.schema import create_table, metric_docs, param_docs


@contextlib.contextmanager
def writing_results(paths: RunPaths) -> Iterator[None]:
    """One writer of results.h5 at a time: a job's end (with its end in run.h5, so that
    no other writer reads the run between the two), ``atoll consolidate`` beside a running
    job, a resume of a spent run. Without a lock (a read-only directory, a file system without
    locks) the write goes on alone, as it would anyway."""
    handle = None
    if paths.run_file.is_file():  # never a new file in a directory that is no run
        with contextlib.suppress(OSError):
            handle = open(paths.results_lock, "a")  # noqa: SIM115 - closed below
    try:
        if handle is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        if handle is not None:
            handle.close()


def consolidate(paths: RunPaths, ending: tuple[int, float, int] | None = None) -> Path:
    """Write ``results.h5`` from the run's files; return its path.

    ``ending``: (job, stop, exit code) of a job whose end run.h5 records only once its
    results.h5 is written (so that a job whose consolidation failed is never recorded as a
    success); results.h5's jobs table shows it ended so.

    Written to a temporary file first and moved in place with ``os.replace``, so a crash never
    leaves half a ``results.h5``. The worker files stay: they are the checkpoint. A full disk
    leaves no temporary file and raises :class:`~atoll.record.full.DiskFull`.
    """
    run = open_run(paths.run_dir)
    if ending is not None:
        job, stop, exit_code = ending
        ended = run.jobs["job"] == job
        run.jobs["stop"][ended] = stop
        run.jobs["exit_code"][ended] = exit_code
    target = paths.results_file
    versions = json.loads(run.jobs["versions"][-1]) if len(run.jobs) else {}
    docs = {"individuals": param_docs(run.space),
            "epochs": metric_docs(run.epochs.dtype.names or ())}
    # v108 stores attributes over 64 KiB (a long config); any HDF5 since 1.8 reads the file.
    with full.built_in_memory(target, libver=("v108", "latest")) as f:
        write_header(f, RESULTS_KIND, consolidated=time.time(),
                     created=run.metadata.get("created", float("nan")),
                     config=run.metadata.get("config", ""),
                     config_json=to_json(run.config_table), space=to_json(run.space.to_dict()),
                     versions=to_json(versions), budget=run.metadata.get("budget", 0),
                     main_metric=run.metadata.get("main_metric", ""),
                     run_id=run.metadata.get("run_id", ""))
        for name in TABLES:
            table = getattr(run, name)
            create_table(f, name, table.dtype, extra_docs=docs.get(name), data=table,
                         compress=True)
    return target
