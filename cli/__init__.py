"""The ``porter`` command line (``porter.cli``)."""
