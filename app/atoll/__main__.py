"""``python -m atoll`` and the ``atoll`` command.

A search or resume catches stop signals before anything else is imported: SLURM may signal a
job step while Python starts, and importing the command line (click and the rest) takes tens of
milliseconds, longer on a loaded node, in which a signal would kill the rank.
"""

import sys


def main() -> None:
    if sys.argv[1:2] in (["search"], ["resume"]):  # a job: stop signals are a stop from now on
        from atoll.engine.early import catch_early

        catch_early()
    from atoll.cli import main as command_line

    command_line()


if __name__ == "__main__":
    main()
