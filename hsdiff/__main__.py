"""``python -m hsdiff``: the command line, as the ``hsdiff`` script runs it."""

from .cli import main

if __name__ == "__main__":  # pragma: no branch
    main()
