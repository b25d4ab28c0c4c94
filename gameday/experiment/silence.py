"""The ``gameday`` extension's ``silence``: which alerts an Alertmanager silence mutes
during the run, where, and who asks; validated with the experiment, held by
:class:`gameday.safety.alertmanager.SilenceHold` while it runs."""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gameday.errors import InvalidInput

__all__ = ["Matcher", "SilenceSpec", "parse_matcher", "silence_spec"]

#: ``name=value``, ``name!=value``, ``name=~regex``, ``name!~regex`` (as amtool writes them).
_MATCHER: Final = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")


@dataclass(frozen=True)
class Matcher:
    """One label matcher of a silence."""

    name: str
    value: str
    is_regex: bool = False
    is_equal: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "isRegex": self.is_regex,
                "isEqual": self.is_equal}

    def line(self) -> str:
        op = {(False, True): "=", (False, False): "!=", (True, True): "=~",
              (True, False): "!~"}[self.is_regex, self.is_equal]
        return f"{self.name}{op}{self.value!r}"


def parse_matcher(text: str, *, path: str) -> Matcher:
    """A matcher from ``name=value`` (``!=``, ``=~``, ``!~``); :class:`InvalidInput` names
    ``path`` when it is not one."""
    found = _MATCHER.match(text)
    if found is None:
        raise InvalidInput(f"must be a matcher like alertname=~'Gpu.*' (=, !=, =~, !~), got "
                           f"{text!r}", path=path)
    name, op, value = found.groups()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        value = value[1:-1]
    if op in ("=~", "!~"):
        try:
            re.compile(value)
        except re.error as exc:
            raise InvalidInput(f"not a regular expression: {exc}", path=path) from None
    return Matcher(name, value, is_regex=op in ("=~", "!~"), is_equal=op in ("=", "=~"))


@dataclass(frozen=True)
class SilenceSpec:
    """The extension's ``silence``: which alerts to mute, where, and who asks."""

    alertmanager: str
    matchers: tuple[Matcher, ...]
    comment: str
    created_by: str = "gameday"

    def line(self) -> str:
        return (f"silence in {self.alertmanager}: {', '.join(m.line() for m in self.matchers)}"
                f" (by {self.created_by}: {self.comment})")


def silence_spec(raw: Any, base: str, *, environ: Mapping[str, str]) -> SilenceSpec:
    """Validate the extension's ``silence`` mapping (key paths under ``base``)."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"must be a mapping, got {type(raw).__name__}", path=base)
    known = ("alertmanager", "matchers", "comment", "created_by")
    for key in raw:
        if key not in known:
            raise InvalidInput(f"unknown key (known: {', '.join(known)})", path=f"{base}.{key}")
    url = raw.get("alertmanager") or environ.get("GAMEDAY_ALERTMANAGER_URL")
    if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
        raise InvalidInput("needs an Alertmanager URL (http://host:9093) here or in "
                           "$GAMEDAY_ALERTMANAGER_URL", path=f"{base}.alertmanager")
    matchers = raw.get("matchers")
    if not isinstance(matchers, Sequence) or isinstance(matchers, str) or not matchers:
        raise InvalidInput("must be a non-empty list of matchers (alertname=~'Gpu.*')",
                           path=f"{base}.matchers")
    parsed = []
    for position, item in enumerate(matchers):
        if not isinstance(item, str):
            raise InvalidInput("must be a string like alertname=GpuDoubleBitEcc",
                               path=f"{base}.matchers[{position}]")
        parsed.append(parse_matcher(item, path=f"{base}.matchers[{position}]"))
    if not any(m.is_equal and m.value and not (m.is_regex and m.value in (".*", ".+"))
               for m in parsed):
        raise InvalidInput("would silence every alert: give at least one matcher that "
                           "selects (alertname=... or a label of the target)",
                           path=f"{base}.matchers")
    texts = {}
    for key, default in (("comment", "gameday: planned game day"), ("created_by", "gameday")):
        value = raw.get(key, default)
        if not isinstance(value, str) or not value.strip():
            raise InvalidInput("must be a non-empty string", path=f"{base}.{key}")
        texts[key] = value.strip()
    return SilenceSpec(alertmanager=url.rstrip("/"), matchers=tuple(parsed),
                       comment=texts["comment"], created_by=texts["created_by"])
