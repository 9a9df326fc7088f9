"""The exit codes of ``atoll search``, ``atoll resume`` and ``atoll doctor``, in one place:
job scripts act on them (jobscripts/common.sh keeps the same numbers)."""

EXIT_OK = 0
"""search/resume: the run's budget is spent; doctor: ready."""
EXIT_FAILED = 1
"""search/resume: the search failed on some ranks (a record it could not write, a bug): every
rank was ended with MPI_Abort after one line naming the rank; fix the cause, then resume."""
EXIT_BAD_INPUT = 2
"""Bad input (config, space, layout, run directory, record); doctor: the search would refuse."""
EXIT_GAVE_UP = 70
"""EX_SOFTWARE: evaluations kept failing and none succeeded; fix the objective, then resume."""
EXIT_DISK_FULL = 74
"""EX_IOERR: a record file could not be written (disk full, quota); free space, then resume.
A job script must not resubmit into a full disk."""
EXIT_STOPPED = 75
"""EX_TEMPFAIL: stopped early (a signal, the wall time); resume to continue."""

ENDED = {EXIT_FAILED: "failed on some ranks (exit 1): see its log, then resume",
         EXIT_GAVE_UP: "gave up (exit 70): fix the objective, then resume",
         EXIT_DISK_FULL: "disk full (exit 74): free space, then resume",
         EXIT_STOPPED: "stopped early (exit 75): resume continues it"}
"""How a job that ended otherwise than done is said by ``atoll watch``."""
