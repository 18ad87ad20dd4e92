"""Reading Revive's YAML files (policy, cluster config) with errors that name the file and field."""

from __future__ import annotations

import stat
from pathlib import Path

import yaml
from pydantic import ValidationError

from revive.errors import ConfigError

MAX_YAML_BYTES = 4 << 20
"""Largest policy or config file read (a real one is a few KB; /dev/zero or a log named by mistake
would otherwise be read until memory runs out)."""


def read_yaml(path: str | Path, what: str) -> object:
    """Parse a YAML file. Raises ``ConfigError`` ("<what> <path>: …") when it is missing,
    unreadable, not a regular file (a FIFO blocks, /dev/zero never ends), over ``MAX_YAML_BYTES``,
    not UTF-8 text, not valid YAML or holds a string UTF-8 cannot encode (a ``"\\ud800"`` escape)."""
    p = Path(path)
    try:
        st = p.stat()
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{what} {p}: not a regular file")
        if st.st_size > MAX_YAML_BYTES:
            raise ConfigError(f"{what} {p}: {st.st_size} bytes; the limit is {MAX_YAML_BYTES}")
        with open(p, "rb") as fh:
            data = fh.read(MAX_YAML_BYTES + 1)
        if len(data) > MAX_YAML_BYTES:  # grew while read (/proc files report size 0)
            raise ConfigError(f"{what} {p}: over {MAX_YAML_BYTES} bytes")
        text = data.decode("utf-8")
    except OSError as e:
        raise ConfigError(f"{what} {p}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} {p}: not a text file (invalid UTF-8 at byte {e.start})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{what} {p}: not valid YAML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{what} {p}: nested too deeply") from None
    if "\\u" in text or "\\U" in text:  # YAML escapes can spell lone surrogates; nothing can send them on
        stack = [doc]
        while stack:
            x = stack.pop()
            if isinstance(x, dict):
                stack.extend(x.keys())
                stack.extend(x.values())
            elif isinstance(x, list):
                stack.extend(x)
            elif isinstance(x, str):
                try:
                    x.encode("utf-8")
                except UnicodeEncodeError as e:
                    raise ConfigError(f"{what} {p}: the string {x[:40]!r} holds a lone surrogate escape "
                                      f"({e.object[e.start:e.end]!r}): not text") from None
    return doc


def field_errors(e: ValidationError) -> list[str]:
    """``["field.path: message", …]`` for each problem pydantic found."""
    return [f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in e.errors()]
