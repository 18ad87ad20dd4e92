"""Reading Revive's YAML files (policy, cluster config) with errors that name the file and field."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from revive.errors import ConfigError


def read_yaml(path: str | Path, what: str) -> object:
    """Parse a YAML file. Raises ``ConfigError`` ("<what> <path>: …") when it is missing,
    unreadable, not UTF-8 text or not valid YAML."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{what} {p}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} {p}: not a text file (invalid UTF-8 at byte {e.start})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{what} {p}: not valid YAML: {e}") from None


def field_errors(e: ValidationError) -> list[str]:
    """``["field.path: message", …]`` for each problem pydantic found."""
    return [f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in e.errors()]
