"""YAML with line numbers: a space file as plain data plus the line of every key and item.

:func:`load_document` parses with PyYAML's safe loader, walks the composed node tree and records,
for every mapping key and sequence item, the line it sits on, keyed by its path
(``parameters.speculative_eagle_topk.choices[2]``). Duplicate keys are refused, and so is input
that would exhaust memory or the stack: a text over :data:`MAX_TEXT_CHARS`, nesting deeper than
:data:`MAX_DEPTH`, more than :data:`MAX_NODES` values written out, or aliases that expand to more
than :data:`MAX_EXPANDED` values (a "billion laughs" is refused before it is expanded).
:class:`Section` is a read view of one mapping in that document whose errors name the file, the
line and the key path, and list the allowed keys (with the closest match) when a key is unknown.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from autotune._errors import ConfigError

Path_ = tuple[Any, ...]
_MERGE_TAG = "tag:yaml.org,2002:merge"

#: The largest YAML text read (characters): a space file is a few kilobytes.
MAX_TEXT_CHARS = 1024 * 1024
#: The deepest nesting of mappings and lists.
MAX_DEPTH = 64
#: The most values (scalars, mappings, lists, aliases) a file may write out.
MAX_NODES = 50_000
#: The most values the file may stand for once its aliases are expanded.
MAX_EXPANDED = 50_000
#: The longest string a key of a space file may hold (``description`` has its own bound).
MAX_STRING_CHARS = 4096


def format_path(path: Path_) -> str:
    """``("parameters", "x", "choices", 2)`` as ``parameters.x.choices[2]``."""
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            text = str(part)
            if not text.isprintable() or len(text) > 80:
                text = repr(text[:80])[1:-1] + ("..." if len(text) > 80 else "")
            out += f".{text}" if out else text
    return out


@dataclass(frozen=True)
class Document:
    """A parsed space file: ``data`` as plain Python values and the line of each path."""

    data: Any
    source: str
    lines: Mapping[str, int]

    def line(self, path: Path_ | str) -> int:
        """The line of ``path`` or, when it is absent, of its nearest present parent."""
        text = path if isinstance(path, str) else format_path(path)
        while text:
            if text in self.lines:
                return self.lines[text]
            cut = max(text.rfind("."), text.rfind("["))
            text = text[:cut] if cut > 0 else ""
        return 1

    def where(self, path: Path_ | str) -> str:
        """``17 (parameters.x.choices)``: the location a :class:`ConfigError` carries."""
        text = path if isinstance(path, str) else format_path(path)
        line = self.line(text)
        return f"{line} ({text})" if text else str(line)

    def error(self, message: str, path: Path_ | str, *, hint: str | None = None) -> ConfigError:
        return ConfigError(message, source=self.source, location=self.where(path), hint=hint)

    def relocate(self, error: ConfigError) -> ConfigError:
        """``error`` (raised with a dotted key path as its location) with the line added."""
        location = error.location or ""
        message = error.message
        prefix = f"{error.source}:{location}: " if error.source else f"{location}: "
        if message.startswith(prefix):
            message = message[len(prefix) :]
        return ConfigError(
            message, source=self.source, location=self.where(location), hint=error.hint
        )

    def root(self) -> Section:
        if not isinstance(self.data, dict):
            raise ConfigError(
                f"a space file must be a mapping of sections, got {_kind(self.data)}",
                source=self.source,
                location="1",
                hint="start from search_spaces/eagle3.yaml (the format: search_spaces/README.md)",
            )
        return Section(self, (), self.data)


def load_document(text: str, *, source: str) -> Document:
    """Parse ``text`` as YAML, recording the line of every key and item.

    Raises:
        ConfigError: malformed YAML (with its line and column), a duplicate key, a recursive alias,
            or a text beyond the limits of the module docstring.
    """
    check_size(text, source=source)
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            return _load(fast, text, source)
        except yaml.YAMLError:
            pass  # reported below in the words of the pure-Python parser, which say more
    try:
        return _load(yaml.SafeLoader, text, source)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        location = None if mark is None else f"{mark.line + 1}:{mark.column + 1}"
        problem = e.problem or "malformed YAML"
        if e.context:
            at = e.context_mark
            opened = "" if at is None or at is mark else f" (line {at.line + 1})"
            problem = f"{e.context}{opened}: {problem}"
        raise ConfigError(
            f"not valid YAML: {problem}",
            source=source,
            location=location,
            hint="check the indentation and quoting around that line",
        ) from e
    except yaml.YAMLError as e:
        raise ConfigError(f"not valid YAML: {e}", source=source) from e


def check_size(text: str, *, source: str, what: str = "file") -> None:
    """Refuse a text longer than :data:`MAX_TEXT_CHARS` before parsing it."""
    if len(text) > MAX_TEXT_CHARS:
        raise ConfigError(
            f"the {what} is more than {MAX_TEXT_CHARS:,} characters long, the most that is read",
            source=source,
            location="1",
            hint="a space file is a few kilobytes: is this the right file?",
        )


def safe_data(text: str, *, source: str) -> Any:
    """``text`` as plain data, under the same limits as :func:`load_document` (no line table).

    For YAML files other than space files (workloads): an empty file is ``None``.
    """
    check_size(text, source=source)
    _scan(yaml.SafeLoader, text, source)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        return None if node is None else _Builder(loader, source, {}).build(node, (), frozenset())
    finally:
        loader.dispose()


def _scan(loader_class: Any, text: str, source: str) -> None:
    """Walk the parser's events (no tree is built) and refuse depth and size beyond the limits.

    The parser is a state machine, so this pass cannot exhaust the stack however deep the text
    nests; the composer and the builder, which recurse, only see what passed.
    """
    loader = loader_class(text)
    depth = nodes = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                nodes += 1
                if depth > MAX_DEPTH:
                    raise _limit(
                        f"nesting deeper than {MAX_DEPTH} levels",
                        event,
                        source,
                        "a space file nests a few levels; flatten the structure",
                    )
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
                nodes += 1
            if nodes > MAX_NODES:
                raise _limit(
                    f"more than {MAX_NODES:,} values",
                    event,
                    source,
                    "a space file holds a few hundred values at most: is this the right file?",
                )
    finally:
        loader.dispose()


def _limit(problem: str, event: Any, source: str, hint: str) -> ConfigError:
    mark = getattr(event, "start_mark", None)
    location = "1" if mark is None else f"{mark.line + 1}:{mark.column + 1}"
    return ConfigError(f"refused: {problem}", source=source, location=location, hint=hint)


def _load(loader_class: Any, text: str, source: str) -> Document:
    _scan(loader_class, text, source)
    loader = loader_class(text)
    lines: dict[str, int] = {}
    try:
        node = loader.get_single_node()
        if node is None:
            raise ConfigError(
                "the file is empty",
                source=source,
                location="1",
                hint="a space needs at least a parameters: section (see search_spaces/README.md)",
            )
        data = _Builder(loader, source, lines).build(node, (), frozenset())
    finally:
        loader.dispose()
    return Document(data, source, lines)


class _Builder:
    def __init__(
        self, loader: Any, source: str, lines: dict[str, int], built: list[int] | None = None
    ) -> None:
        self.loader = loader
        self.source = source
        self.lines = lines
        self.built = [0] if built is None else built  # shared with the builders of merges

    def build(self, node: yaml.Node, path: Path_, stack: frozenset[int]) -> Any:
        if id(node) in stack:
            raise self._error("an alias refers to itself", node, path)
        self.built[0] += 1
        if self.built[0] > MAX_EXPANDED:
            raise self._error(
                f"refused: the aliases (*name) expand to more than {MAX_EXPANDED:,} values",
                node,
                path,
                hint="write the values out, or use fewer aliases of aliases",
            )
        stack = stack | {id(node)}
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, stack)
        if isinstance(node, yaml.SequenceNode):
            out = []
            for i, item in enumerate(node.value):
                self.lines[format_path((*path, i))] = item.start_mark.line + 1
                out.append(self.build(item, (*path, i), stack))
            return out
        return self._scalar(node, path)

    def _scalar(self, node: yaml.Node, path: Path_) -> Any:
        try:
            return self.loader.construct_object(node, deep=True)
        except (ValueError, OverflowError, TypeError) as e:
            # e.g. an integer of more than 4300 digits, a date such as 2024-13-45
            text = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise self._error(
                f"cannot read the value {_excerpt(str(node.value))}: {text}",
                node,
                path,
                hint="quote it to keep it as text, or write a smaller number",
            ) from None

    def _mapping(
        self, node: yaml.MappingNode, path: Path_, stack: frozenset[int]
    ) -> dict[Any, Any]:
        out: dict[Any, Any] = {}
        first_line: dict[Any, int] = {}
        merges: list[yaml.Node] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                merges.append(value_node)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise self._error("a key must be a plain name", key_node, path)
            key = self._scalar(key_node, path)
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise self._error(
                    f"duplicate key {key!r} (first given at line {first_line[key]})",
                    key_node,
                    (*path, key),
                    hint="give each key once; the second one would silently replace the first",
                )
            first_line[key] = line
            self.lines[format_path((*path, key))] = line
            out[key] = self.build(value_node, (*path, key), stack)
        for merge in merges:
            sources = merge.value if isinstance(merge, yaml.SequenceNode) else [merge]
            for src in sources:
                if not isinstance(src, yaml.MappingNode):
                    raise self._error("a merge key (<<) must refer to a mapping", src, path)
                scratch = _Builder(self.loader, self.source, {}, self.built)
                for key, value in scratch._mapping(src, path, stack).items():
                    if key in out:
                        continue  # a key written out beside the merge wins
                    out[key] = value
                    base = format_path((*path, key))
                    for p, line in scratch.lines.items():
                        if p == base or p.startswith((base + ".", base + "[")):
                            self.lines[p] = line
        return out

    def _error(
        self, message: str, node: yaml.Node, path: Path_, *, hint: str | None = None
    ) -> ConfigError:
        text = format_path(path)
        line = node.start_mark.line + 1
        location = f"{line} ({text})" if text else str(line)
        return ConfigError(message, source=self.source, location=location, hint=hint)


class Section:
    """One mapping of a :class:`Document`, with typed, located accessors."""

    def __init__(self, doc: Document, path: Path_, data: Mapping[Any, Any]) -> None:
        self.doc = doc
        self.path = path
        self.data = data

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def error(self, message: str, key: Any = None, *, hint: str | None = None) -> ConfigError:
        path = self.path if key is None else (*self.path, key)
        return self.doc.error(message, path, hint=hint)

    def check_keys(self, allowed: Iterable[str], *, what: str = "key") -> None:
        """Refuse keys outside ``allowed``, naming the closest allowed one."""
        allowed = list(allowed)
        for key in self.data:
            if key not in allowed:
                raise self.error(
                    f"unknown {what} {_excerpt(key)}", key, hint=suggest(str(key)[:200], allowed)
                )

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def require(self, key: str) -> Any:
        if key not in self.data:
            raise self.error(f"missing key {key!r}", hint=f"add {key}: under this section")
        return self.data[key]

    def section(self, key: str, *, required: bool = False) -> Section:
        """The mapping under ``key`` (an empty one when absent and not required)."""
        raw = self.require(key) if required else self.data.get(key)
        if raw is None:
            return Section(self.doc, (*self.path, key), {})
        if not isinstance(raw, dict):
            raise self.error(f"must be a mapping, got {_kind(raw)}", key)
        return Section(self.doc, (*self.path, key), raw)

    def string(self, key: str, default: str | None = None, *, limit: int = MAX_STRING_CHARS) -> Any:
        """A non-empty string; ``None`` when absent (or null) and there is no default."""
        raw = self.data.get(key, default)
        if raw is None and default is None:
            return None
        if not isinstance(raw, str) or not raw:
            hint = "quote it in the file" if isinstance(raw, (int, float)) else None
            raise self.error(f"must be a non-empty string, got {_excerpt(raw)}", key, hint=hint)
        return self.checked_text(raw, key, limit=limit)

    def checked_text(self, raw: str, key: Any, *, limit: int = MAX_STRING_CHARS) -> str:
        """``raw`` if it has no NUL character and at most ``limit`` characters."""
        if "\x00" in raw:
            raise self.error(
                f"contains a NUL character: {_excerpt(raw)}",
                key,
                hint="a NUL cannot be passed to a program (arguments and environment)",
            )
        if len(raw) > limit:
            raise self.error(f"is {len(raw):,} characters long; at most {limit:,} are allowed", key)
        return raw

    def boolean(self, key: str, default: bool) -> bool:
        raw = self.data.get(key, default)
        if not isinstance(raw, bool):
            raise self.error(f"must be true or false, got {raw!r}", key)
        return raw

    def integer(
        self, key: str, default: int | None, *, minimum: int, maximum: int | None = None
    ) -> Any:
        raw = self.data.get(key, default)
        if raw is None and default is None:
            return None
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise self.error(f"must be an integer, got {raw!r}", key)
        if raw < minimum or (maximum is not None and raw > maximum):
            top = "" if maximum is None else f" and <= {maximum}"
            raise self.error(f"must be >= {minimum}{top}, got {_excerpt(raw)}", key)
        return raw

    def number(
        self,
        key: str,
        default: float | None,
        *,
        positive: bool = False,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> Any:
        """A finite number: > 0 with ``positive``, else >= 0; ``None`` if absent, no default.

        ``minimum`` and ``maximum`` bound it further (inclusive).
        """
        raw = self.data.get(key, default)
        if raw is None and default is None:
            return None
        value = as_number(raw)
        if value is None:
            raise self.error(f"must be a number, got {raw!r}", key, hint=number_hint(raw))
        if positive and value <= 0:
            raise self.error(f"must be a positive number, got {raw!r}", key)
        if not positive and value < 0:
            raise self.error(f"must be >= 0, got {raw!r}", key)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            low = "" if minimum is None else f">= {minimum:g}"
            high = "" if maximum is None else f"<= {maximum:g}"
            both = " and ".join(x for x in (low, high) if x)
            raise self.error(f"must be {both}, got {raw!r}", key)
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        """A list of argv-like items; numbers become their text, anything else is refused."""
        raw = self.data.get(key)
        if raw is None:
            return ()
        if not isinstance(raw, list):
            raise self.error(f"must be a list, got {_kind(raw)}", key, hint="write [a, b, c]")
        out = []
        for i, item in enumerate(raw):
            if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                raise self.doc.error(
                    f"must be a string, got {_excerpt(item)}", (*self.path, key, i), hint="quote it"
                )
            text = str(item)
            Section(self.doc, (*self.path, key), {}).checked_text(text, i)
            out.append(text)
        return tuple(out)


def as_number(raw: Any) -> float | None:
    """``raw`` as a finite float, or None when it is not a number (booleans are not)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        return None
    value = float(raw)
    return value if math.isfinite(value) else None


def number_hint(raw: Any) -> str | None:
    """Advice for YAML 1.1's reading of ``1e-3`` (no dot) as text."""
    if isinstance(raw, str):
        try:
            float(raw)
        except ValueError:
            return None
        return "YAML reads an exponent without a dot as text: write 1.0e-3, not 1e-3"
    return None


def suggest(key: str, allowed: Iterable[str]) -> str:
    """``did you mean 'x'? allowed: a, b, c``."""
    allowed = sorted(allowed)
    close = difflib.get_close_matches(key, allowed, n=1)
    head = f"did you mean {close[0]!r}? " if close else ""
    return f"{head}allowed: {', '.join(allowed)}"


def _excerpt(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to about ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return _excerpt(value)
