"""``python -m atoll`` and the ``atoll`` command.

A search or resume catches stop signals before anything else is imported: SLURM may signal a
job step while Python starts, and importing the command line (click and the rest) takes tens of
milliseconds, longer on a loaded node, in which a signal would kill the rank. Once the command
has ended, they are ignored until the process is gone (MPI finalizes, the interpreter shuts
down): a repeated signal must not turn a saved stop (exit 75) into a killed rank.
"""

import sys


def main() -> None:
    job = sys.argv[1:2] in (["search"], ["resume"])
    if job:  # stop signals are a stop from now on
        from atoll.engine.early import catch_early

        catch_early()
    from atoll.cli import main as command_line

    try:
        command_line()
    finally:
        if job:
            from atoll.engine.early import ignore_from_now

            ignore_from_now()


if __name__ == "__main__":
    main()
