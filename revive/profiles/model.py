"""Training-progress profiles as data: pydantic models, validation and the untrusted-input gate.

A *profile* says how one framework prints progress: a regex per event kind (RE2 subset, named
groups), the literal prefilter strings, and optional facts about its save signal and checkpoint
layout. Profiles come from ``profiles.yaml`` (trusted, shipped with Revive) and may also come from
places Revive does not control (a policy file, a job's ``--comment`` JSON), so everything here is
bounded: pattern size, RE2 program size, number of profiles, input size and nesting.

Public API::

    parse_profiles(data, source, trusted) -> ProfileSet      # refuses bad input with ConfigError
    Profile, ProfileSet, PatternSpec, SaveSignal, CheckpointLayout, Limits
    KINDS, ALLOWED_GROUPS, TRUSTED_LIMITS, UNTRUSTED_LIMITS
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

import re2
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from revive.errors import ConfigError
from revive.signals import SignalScope, normalize_signal

Kind = Literal[
    "run_start",
    "checkpoint_saved",
    "checkpoint_loaded",
    "checkpoint_saving",
    "checkpoint_loading",
    "requeue",
    "iteration",
    "metrics",
]
KINDS: tuple[str, ...] = (
    "run_start",
    "checkpoint_saved",
    "checkpoint_loaded",
    "checkpoint_saving",
    "checkpoint_loading",
    "requeue",
    "iteration",
    "metrics",
)
"""Event kinds, in the order a line's patterns are tried within one profile."""

_CKPT_GROUPS = frozenset({"iter", "epoch"})
ALLOWED_GROUPS: dict[str, frozenset[str]] = {
    "iteration": frozenset(
        {"iter", "total", "step_time_s", "step_time_ms", "rate_it_s", "loss", "throughput", "epoch", "batch", "batches"}
    ),
    "checkpoint_saving": _CKPT_GROUPS,
    "checkpoint_saved": _CKPT_GROUPS,
    "checkpoint_loading": _CKPT_GROUPS,
    "checkpoint_loaded": _CKPT_GROUPS,
    "run_start": frozenset({"restart"}),
    "requeue": frozenset({"job_id"}),
    "metrics": frozenset({"loss", "epoch"}),
}
REQUIRED_GROUPS: dict[str, frozenset[str]] = {"iteration": frozenset({"iter"})}


@dataclass(frozen=True)
class Limits:
    """Caps applied while parsing profiles (bytes are UTF-8 bytes)."""

    max_input_bytes: int
    max_nodes: int
    max_depth: int
    max_profiles: int
    max_pattern_bytes: int
    max_patterns_per_kind: int
    max_literals: int
    max_literal_bytes: int
    max_text_bytes: int
    max_program_size: int
    re2_max_mem: int


TRUSTED_LIMITS = Limits(
    max_input_bytes=1 << 20, max_nodes=50_000, max_depth=12, max_profiles=64, max_pattern_bytes=1024,
    max_patterns_per_kind=16, max_literals=32, max_literal_bytes=128, max_text_bytes=2048,
    max_program_size=4000, re2_max_mem=8 << 20,
)
UNTRUSTED_LIMITS = Limits(
    max_input_bytes=64 << 10, max_nodes=4000, max_depth=8, max_profiles=16, max_pattern_bytes=512,
    max_patterns_per_kind=8, max_literals=16, max_literal_bytes=128, max_text_bytes=512,
    max_program_size=1500, re2_max_mem=2 << 20,
)


def _re2_options(max_mem: int) -> Any:
    opts = re2.Options()
    opts.log_errors = False
    opts.max_mem = max_mem
    return opts


def compile_re2(pattern: str, limits: Limits = TRUSTED_LIMITS) -> Any:
    """Compile ``pattern`` with RE2 under ``limits``; ValueError names the problem."""
    size = len(pattern.encode("utf-8"))
    if size > limits.max_pattern_bytes:
        raise ValueError(f"pattern is {size} bytes, over the {limits.max_pattern_bytes}-byte cap")
    try:
        compiled = re2.compile(pattern, _re2_options(limits.re2_max_mem))
    except re2.error as e:
        detail = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise ValueError(f"not RE2 syntax (no backreferences, lookaround or possessive quantifiers): {detail}") from None
    prog = getattr(compiled, "programsize", 0)
    if prog > limits.max_program_size:
        raise ValueError(f"RE2 program size {prog} is over the cap {limits.max_program_size}")
    if compiled.search("") is not None:
        raise ValueError("pattern matches the empty string (it would match every line)")
    return compiled


def _limits(info: ValidationInfo) -> Limits:
    ctx = info.context or {}
    return ctx.get("limits", TRUSTED_LIMITS)


def _check_text(value: str, what: str, limits: Limits) -> str:
    if len(value.encode("utf-8")) > limits.max_text_bytes:
        raise ValueError(f"{what} is longer than {limits.max_text_bytes} bytes")
    return value


class PatternSpec(BaseModel):
    """One regex (RE2 subset, named groups) and, optionally, its own prefilter literals."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    regex: str
    literals: list[str] = Field(default_factory=list)


class SaveSignal(BaseModel):
    """How the framework saves on a signal before it is stopped (facts read from its source)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    signal: str
    configurable: str = ""
    handler: str = ""
    action: str = ""
    prints: list[str] = Field(default_factory=list)
    scancel: dict[str, str] = Field(default_factory=dict)
    """scancel form → whether it reaches the handler (and why)."""
    sbatch: str = ""
    resume: str = ""
    scope: SignalScope = SignalScope.steps
    """The ``scancel`` form Revive uses to reach the handler (``revive.signals``; the ``scancel``
    notes above say why)."""
    requeues_itself: bool = False
    """The handler requeues the job itself after saving (Lightning runs ``scontrol requeue``):
    Revive then never requeues a second time (it checks the restart count)."""

    @field_validator("signal")
    @classmethod
    def _known_signal(cls, v: str) -> str:
        normalize_signal(v)  # ValueError: not a save signal
        return v


class CheckpointLayout(BaseModel):
    """Where checkpoints land on disk; ``dir_pattern``/``file_patterns`` are RE2 with an ``iter`` group."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    description: str = ""
    tracker_file: str | None = None
    dir_pattern: str | None = None
    file_patterns: list[str] = Field(default_factory=list)


class Profile(BaseModel):
    """One framework's progress formats.

    ``patterns`` maps an event kind (see ``KINDS``) to regexes; ``literals`` is the prefilter (a line
    must contain one for this profile's regexes to run; a pattern with its own ``literals`` runs
    only on lines holding one of those).
    ``infer_checkpoint_iter``: a save/load line without a step takes the attempt's last iteration.
    ``save_is_synchronous``: the save runs inline (and may print no "saved" line); it counts as
    done once a later iteration of the same attempt is seen.
    ``run_start_after_load``: the run-start line follows the restore lines of the same launch.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    framework: str
    version: str
    source: list[str]
    literals: list[str]
    patterns: dict[Kind, list[PatternSpec]]
    infer_checkpoint_iter: bool = False
    save_is_synchronous: bool = False
    run_start_after_load: bool = False
    save_signal: SaveSignal | None = None
    checkpoint_layout: CheckpointLayout | None = None
    notes: str = ""
    _trusted: bool = PrivateAttr(default=False)

    @property
    def trusted(self) -> bool:
        """Parsed with ``trusted=True`` (shipped or operator-written). The extractor may then run
        this profile's regexes on the stdlib engine (faster per call); untrusted profiles only ever
        run on RE2, so a hostile pattern cannot backtrack for long."""
        return self._trusted

    @field_validator("source", mode="before")
    @classmethod
    def _source_list(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("patterns", mode="before")
    @classmethod
    def _pattern_specs(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        out: dict[Any, Any] = {}
        for kind, specs in v.items():
            if isinstance(specs, (str, dict)):
                specs = [specs]
            if isinstance(specs, list):
                specs = [{"regex": s} if isinstance(s, str) else s for s in specs]
            out[kind] = specs
        return out

    @model_validator(mode="after")
    def _validate(self, info: ValidationInfo) -> Profile:
        lim = _limits(info)
        for what, text in (("framework", self.framework), ("version", self.version), ("notes", self.notes)):
            _check_text(text, what, lim)
        for i, s in enumerate(self.source):
            _check_text(s, f"source[{i}]", lim)
        if not self.patterns:
            raise ValueError("patterns: at least one pattern kind is required")
        all_lits = list(self.literals)
        for kind, specs in self.patterns.items():
            if not specs:
                raise ValueError(f"patterns.{kind}: empty list")
            if len(specs) > lim.max_patterns_per_kind:
                raise ValueError(f"patterns.{kind}: {len(specs)} patterns, over the cap {lim.max_patterns_per_kind}")
            for i, spec in enumerate(specs):
                where = f"patterns.{kind}[{i}]"
                try:
                    compiled = compile_re2(spec.regex, lim)
                except ValueError as e:
                    raise ValueError(f"{where}: {e}") from None
                names = set(compiled.groupindex)
                bad = names - ALLOWED_GROUPS[kind]
                if bad:
                    raise ValueError(
                        f"{where}: unknown named group(s) {sorted(bad)}; {kind} allows {sorted(ALLOWED_GROUPS[kind])}"
                    )
                missing = REQUIRED_GROUPS.get(kind, frozenset()) - names
                if missing:
                    raise ValueError(f"{where}: missing required named group(s) {sorted(missing)}")
                all_lits.extend(spec.literals)
        if not all_lits:
            raise ValueError("literals: at least one prefilter literal is required")
        if len(set(all_lits)) > lim.max_literals:
            raise ValueError(f"literals: {len(set(all_lits))} literals, over the cap {lim.max_literals}")
        for lit in all_lits:
            if not lit.strip():
                raise ValueError("literals: an empty or blank literal would let every line through")
            if len(lit.encode("utf-8")) > lim.max_literal_bytes:
                raise ValueError(f"literals: {lit[:40]!r}… is over {lim.max_literal_bytes} bytes")
        if self.checkpoint_layout:
            _check_text(self.checkpoint_layout.description, "checkpoint_layout.description", lim)
            pats = ([self.checkpoint_layout.dir_pattern] if self.checkpoint_layout.dir_pattern else [])
            for j, p in enumerate(pats + list(self.checkpoint_layout.file_patterns)):
                try:
                    compile_re2(p, lim)
                except ValueError as e:
                    raise ValueError(f"checkpoint_layout pattern {j}: {e}") from None
        if self.save_signal:
            ss = self.save_signal
            for what, text in [("signal", ss.signal), ("action", ss.action), ("handler", ss.handler),
                               ("configurable", ss.configurable), ("sbatch", ss.sbatch), ("resume", ss.resume),
                               *((f"scancel[{k}]", f"{k} {v}") for k, v in ss.scancel.items()),
                               *((f"prints[{i}]", p) for i, p in enumerate(ss.prints))]:
                _check_text(text, f"save_signal.{what}", lim)
        return self

    def all_literals(self) -> list[str]:
        """Profile literals plus every pattern's own literals, de-duplicated, in order."""
        seen: dict[str, None] = {}
        for lit in self.literals:
            seen.setdefault(lit, None)
        for specs in self.patterns.values():
            for spec in specs:
                for lit in spec.literals:
                    seen.setdefault(lit, None)
        return list(seen)


class ProfileSet(BaseModel):
    """An ordered, id-unique list of profiles (earlier profiles win when two match a line)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: int = 1
    profiles: list[Profile]

    @model_validator(mode="after")
    def _unique(self, info: ValidationInfo) -> ProfileSet:
        lim = _limits(info)
        if len(self.profiles) > lim.max_profiles:
            raise ValueError(f"{len(self.profiles)} profiles, over the cap {lim.max_profiles}")
        ids = [p.id for p in self.profiles]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"duplicate profile id(s) {dup}")
        return self

    def ids(self) -> list[str]:
        return [p.id for p in self.profiles]

    def get(self, profile_id: str) -> Profile | None:
        return next((p for p in self.profiles if p.id == profile_id), None)

    def select(self, ids: list[str]) -> ProfileSet:
        """The subset with these ids, in this set's order."""
        want = set(ids)
        return ProfileSet(schema_version=self.schema_version, profiles=[p for p in self.profiles if p.id in want])

    def merged(self, extra: ProfileSet, *, first: bool = True, allow_replace: bool = False) -> ProfileSet:
        """This set plus ``extra``'s profiles (tried before this set's when ``first``).

        An ``extra`` id that is already here is refused with ``ConfigError`` unless
        ``allow_replace`` (then ``extra``'s profile replaces it). Profiles keep their trust flag.
        """
        extra_ids = set(extra.ids())
        clash = sorted(extra_ids & set(self.ids()))
        if clash and not allow_replace:
            raise ConfigError(f"profile id(s) {clash} already defined; rename them or allow replacing")
        kept = [p for p in self.profiles if p.id not in extra_ids]
        profiles = list(extra.profiles) + kept if first else kept + list(extra.profiles)
        return ProfileSet.model_validate({"schema_version": self.schema_version, "profiles": profiles},
                                         context={"limits": TRUSTED_LIMITS})


# ----------------------------------------------------------------------------- parsing
def _check_shape(obj: Any, limits: Limits, source: str) -> None:
    """Refuse inputs with too many nodes or too deep nesting (counts shared/aliased nodes each
    time they are reached, so YAML alias bombs are refused rather than walked)."""
    count = 0
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > limits.max_nodes:
            raise ConfigError(f"{source}: profile input has more than {limits.max_nodes} values")
        if depth > limits.max_depth:
            raise ConfigError(f"{source}: profile input is nested deeper than {limits.max_depth} levels")
        if isinstance(node, dict):
            for k, v in node.items():
                if not isinstance(k, str):
                    raise ConfigError(f"{source}: profile input has a non-string key {k!r}")
                stack.append((v, depth + 1))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
        elif not (node is None or isinstance(node, (str, int, float, bool))):
            raise ConfigError(f"{source}: profile input holds a {type(node).__name__}, not JSON/YAML data")


def _load_text(data: str | bytes, limits: Limits, source: str) -> Any:
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if len(raw) > limits.max_input_bytes:
        raise ConfigError(f"{source}: profile input is {len(raw)} bytes, over the {limits.max_input_bytes}-byte cap")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{source}: profile input is not UTF-8 ({e.reason} at byte {e.start})") from None
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: profile input is neither JSON nor YAML: {str(e).splitlines()[0]}") from None


def _error_text(e: ValidationError) -> str:
    err = e.errors(include_url=False)[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    msg = str(err.get("msg", "invalid"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    return f"{loc}: {msg}" if loc else msg


def parse_profiles(data: Any, source: str, trusted: bool) -> ProfileSet:
    """Validate profiles from ``data`` and return a ``ProfileSet``.

    ``data``: YAML/JSON text (str or bytes), or already-parsed data — a mapping with ``profiles``
    (and optional ``schema_version``), a list of profile mappings, or one profile mapping.
    ``source``: where it came from, named in errors (e.g. ``"policy.yaml"``, ``"job 123 --comment"``).
    ``trusted``: False for anything a user or job controls; then the tighter ``UNTRUSTED_LIMITS``
    apply (input ≤ 64 KiB, ≤ 16 profiles, patterns ≤ 512 bytes, small RE2 programs).

    Raises ``revive.errors.ConfigError`` naming the source, the profile id, the field and the problem
    (bad or non-RE2 regex, unknown named group, oversize input, duplicate id, ...).
    """
    limits = TRUSTED_LIMITS if trusted else UNTRUSTED_LIMITS
    if isinstance(data, (str, bytes, bytearray)):
        data = _load_text(data, limits, source)
    _check_shape(data, limits, source)
    if isinstance(data, dict) and "profiles" in data:
        unknown = set(data) - {"profiles", "schema_version"}
        if unknown:
            raise ConfigError(f"{source}: unknown top-level key(s) {sorted(unknown)}")
        schema_version, items = data.get("schema_version", 1), data["profiles"]
    elif isinstance(data, dict):
        schema_version, items = 1, [data]
    elif isinstance(data, list):
        schema_version, items = 1, data
    else:
        raise ConfigError(f"{source}: expected a mapping with 'profiles' or a list of profiles, got {type(data).__name__}")
    if schema_version != 1:
        raise ConfigError(f"{source}: schema_version {schema_version!r} is not supported (only 1)")
    if not isinstance(items, list):
        raise ConfigError(f"{source}: 'profiles' must be a list")
    if len(items) > limits.max_profiles:
        raise ConfigError(f"{source}: {len(items)} profiles, over the cap {limits.max_profiles}")
    ctx = {"limits": limits}
    profiles: list[Profile] = []
    for n, item in enumerate(items):
        pid = item.get("id") if isinstance(item, dict) else None
        name = f"profile {pid!r}" if isinstance(pid, str) else f"profile #{n}"
        if not isinstance(item, dict):
            raise ConfigError(f"{source}: {name}: expected a mapping, got {type(item).__name__}")
        try:
            p = Profile.model_validate(item, context=ctx)
            p._trusted = trusted
            profiles.append(p)
        except ValidationError as e:
            raise ConfigError(f"{source}: {name}: {_error_text(e)}") from None
    try:
        return ProfileSet.model_validate({"schema_version": 1, "profiles": profiles}, context=ctx)
    except ValidationError as e:
        raise ConfigError(f"{source}: {_error_text(e)}") from None
