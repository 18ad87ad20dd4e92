"""The application layer: the ``revive`` command line (``cli.main``), the demo and history replay.

It may import every other layer (core ``revive``, ``activities``, ``runbooks``, ``workflows``,
``worker``); nothing imports it (``tests/test_layers.py`` checks the direction).
"""
