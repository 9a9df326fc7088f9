"""``python -m atoll`` is the ``atoll`` command."""

from atoll.cli import main

main()
