"""``Fail``: a command's clear refusal (message + exit code), turned into ``error: …`` by ``cli.main.main``.

In its own module so commands defined outside ``cli.main`` (``cli.safety``) raise the same class
when the CLI runs as ``python -m cli.main`` (where ``cli.main`` is also ``__main__``).
"""

from __future__ import annotations


class Fail(Exception):
    """Exit with ``code`` (2 bad input, 3 refused, 4 no worker answered) after printing ``msg``."""

    def __init__(self, msg: str, code: int = 1) -> None:
        super().__init__(msg)
        self.code = code
