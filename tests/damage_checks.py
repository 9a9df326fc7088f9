"""What every damage test asks of a reader: one line, exit 2, no traceback, no record byte
changed."""

from __future__ import annotations

from pathlib import Path

from conftest import atoll_cmd, run


def record_bytes(run_dir: Path) -> dict[str, bytes]:
    """The record files' bytes (the claim file is the job's business, not the record's)."""
    return {p.name: p.read_bytes() for p in [run_dir / "run.h5", *run_dir.glob("workers/*")]}


def refused(run_dir: Path, argv: tuple[str, ...]) -> str:
    """Run the reader ``argv`` on ``run_dir``, check that it refused the run as it should, and
    return its last line."""
    before = record_bytes(run_dir)
    done = run(atoll_cmd(*argv, str(run_dir)), timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert record_bytes(run_dir) == before
    return done.stderr.splitlines()[-1]
