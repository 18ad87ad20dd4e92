"""Training-progress profiles as data.

``profiles.yaml`` (shipped) describes, per framework, the lines that mean progress, checkpoint
saves/loads and launches; ``model`` validates profiles (RE2-only regexes, size caps, untrusted
input gate); ``extract`` turns log lines into events and summaries (pure, no I/O).

Public API::

    load_builtin_profiles() -> ProfileSet                          (cached)
    parse_profiles(data, source, trusted) -> ProfileSet            (ConfigError on bad input)
    ProgressExtractor(profiles=None).events(line) / .classify(line)
    summarize(lines, profiles=None) -> ProgressSummary
    detect_profile(lines, profiles=None, max_lines=None) -> list[str]
    report(lines, fmt="text"|"json", profiles=None) -> str          (what a CLI prints)
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path

from revive.profiles.model import (
    ALLOWED_GROUPS,
    KINDS,
    TRUSTED_LIMITS,
    UNTRUSTED_LIMITS,
    CheckpointLayout,
    Limits,
    PatternSpec,
    Profile,
    ProfileSet,
    SaveSignal,
    parse_profiles,
)

PROFILES_FILE = Path(__file__).with_name("profiles.yaml")


@functools.lru_cache(maxsize=1)
def load_builtin_profiles() -> ProfileSet:
    """The profiles shipped in ``revive/profiles/profiles.yaml`` (trusted)."""
    return parse_profiles(PROFILES_FILE.read_text(encoding="utf-8"), str(PROFILES_FILE.name), trusted=True)


from revive.profiles.extract import (  # noqa: E402  (extract imports load_builtin_profiles lazily)
    Attempt,
    CheckpointLoaded,
    CheckpointLoading,
    CheckpointRecord,
    CheckpointSaved,
    CheckpointSaving,
    Event,
    Iteration,
    Metrics,
    ProgressExtractor,
    ProgressSummary,
    Requeued,
    RunStart,
    detect_profile,
    summarize,
)


def report(
    lines: Iterable[str | bytes],
    fmt: str = "text",
    profiles: ProgressExtractor | ProfileSet | Iterable[Profile] | None = None,
) -> str:
    """Summarize ``lines`` (an iterable of str/bytes log lines) and render it: ``fmt="text"`` a short
    human-readable report, ``fmt="json"`` the ``ProgressSummary`` as JSON. Pure: the caller reads
    the file. ``profiles``: a ``ProfileSet`` / ``ProgressExtractor`` (default: built-in)."""
    summary = summarize(lines, profiles)
    if fmt == "json":
        return summary.model_dump_json(indent=2) + "\n"
    if fmt != "text":
        raise ValueError(f"fmt must be 'text' or 'json', not {fmt!r}")
    return summary.to_text()


__all__ = [
    "ALLOWED_GROUPS", "KINDS", "PROFILES_FILE", "TRUSTED_LIMITS", "UNTRUSTED_LIMITS",
    "Attempt", "CheckpointLayout", "CheckpointLoaded", "CheckpointLoading", "CheckpointRecord", "CheckpointSaved",
    "CheckpointSaving", "Event", "Iteration", "Limits", "Metrics", "PatternSpec", "Profile", "ProfileSet",
    "ProgressExtractor", "ProgressSummary", "Requeued", "RunStart", "SaveSignal",
    "detect_profile", "load_builtin_profiles", "parse_profiles", "report", "summarize",
]
