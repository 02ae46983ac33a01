"""The ``kompakt`` command line (entry point: :func:`kompakt.cli.main.main`)."""
