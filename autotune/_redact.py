"""Redaction of secrets (API keys, tokens, passwords) from anything that is recorded.

Nothing secret is stored or shown: not in the study's attributes (the space text, the recorded
``command`` and ``sglang_command``), not in reports, logs or artifacts. A value is secret when

* it follows, or is joined by ``=`` to, a flag whose name says so: ``--api-key``, a flag with a
  word ``key``, ``secret``, ``password``, ``passwd``, ``pass``, ``credential(s)`` or
  ``authorization``, or ending in ``token`` / ``auth`` (``--hf-token``, but not
  ``--num-draft-tokens``, ``--tokenizer-path`` or ``--bucket-time-to-first-token``);
  an abbreviation of a known secret flag (``--api-k``, argparse accepts it) counts too;
* it is the value of an environment variable (or a ``NAME=value`` word) whose name has a word
  that is, or ends in, ``TOKEN``, ``KEY``, ``SECRET``, ``PASS``, ``PASSWORD``, ``PASSWD``,
  ``CREDENTIAL`` (``HF_TOKEN``, ``HUGGING_FACE_HUB_TOKEN``, ``OPENAI_KEY``, ``DB_PASS``,
  ``AWS_SECRET_ACCESS_KEY``; not ``TOKENIZERS_PARALLELISM``);
* it is the password of a URL (``scheme://user:PASSWORD@host``), in any argument or value;
* it looks like a token by itself (``hf_...``, ``sk-...``).

Values known to be secret (the API key of a launch, secret environment values) are also
replaced wherever they occur in a text, such as a server's log (:func:`redact_values`).

The space file is stored with its secret values replaced by :data:`PLACEHOLDER`
(:func:`redact_space_text`); the text stays valid YAML with the same lines, so a resumed study
parses it as before and takes the secrets again from the original file or the environment.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REDACTED = "***"
#: What replaces a secret value in the stored space text.
PLACEHOLDER = "<redacted>"

#: Words of a name (split at ``-``, ``_``, ``.``) that mark it secret on their own.
_SECRET_WORDS = frozenset(
    {
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWORDS",
        "PASSWD",
        "PASS",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "APIKEY",
        "KEY",
        "KEYS",
        "AUTHORIZATION",
    }
)
#: Words that mark a short flag name secret when it ends with them (``--hf-token``,
#: ``--auth-token``, but not ``--bucket-time-to-first-token``).
_SECRET_LAST_WORDS = frozenset({"TOKEN", "AUTH"})
_SHORT_NAME_WORDS = 4
#: Environment names: a word that ends with one of these (``HF_TOKEN``, ``OPENAI_KEY``,
#: ``DBPASS``, ``MYTOKEN``) marks it secret, unless it is one of the known harmless words.
_ENV_SECRET_ENDINGS = ("TOKEN", "KEY", "SECRET", "PASS", "PASSWORD", "PASSWD", "CREDENTIAL")
_ENV_HARMLESS_WORDS = frozenset({"BYPASS", "COMPASS", "MONKEY", "TURNKEY", "HOTKEY"})
#: Flags whose value is a file name or a switch, not a secret, although their name says "key".
_NOT_SECRET_FLAGS = frozenset({"--ssl-keyfile", "--ssl-certfile"})
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+")
_SECRET_FLAGS = frozenset(
    {
        "--api-key",
        "--admin-api-key",
        "--hf-token",
        "--token",
        "--password",
        "--ssl-keyfile-password",
    }
)
#: An abbreviation of a secret flag is only recognised from this length on (``--api``).
_MIN_ABBREV = 5
_SECRET_IN_TEXT = re.compile(r"\b(hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_\-]{8,})\b")
#: ``scheme://user:password@`` (the password group is replaced).
_URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@'\"]*:)([^\s/@'\"]+)(@)")
_BEARER = re.compile(r"(\b(?:Bearer|Basic|Token)\s+)(?!\*\*\*|<redacted>)[A-Za-z0-9._~+/=\-]+")
#: ``name='value'``, ``name="value"`` and ``name=value`` (python reprs, env words, log lines).
_ASSIGNMENT = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*)(?P<eq>\s*[=:]\s*)"
    r"(?P<value>'[^'\n]*'|\"[^\"\n]*\"|[^\s'\",;()=\]}]+)"
)
#: ``--flag value`` in a command line written as one text.
_FLAG_VALUE = re.compile(r"(?P<flag>--[A-Za-z0-9][A-Za-z0-9\-_]*)(?P<sep>\s+|=)(?P<value>\S+)")


def _words(name: str) -> list[str]:
    return [w for w in _WORD_SPLIT.split(name.upper()) if w]


def is_secret_name(name: str) -> bool:
    """Whether a flag (or setting) name looks like it holds a secret.

    Judged by whole words, so ``HF_TOKEN`` and ``--api-key`` are secret while
    ``--num-draft-tokens``, ``--tokenizer-path``, ``--max-new-tokens`` and ``--token-map`` are
    not.
    """
    if name.split("=", 1)[0] in _NOT_SECRET_FLAGS:
        return False
    words = _words(name)
    if any(w in _SECRET_WORDS for w in words):
        return True
    if words and words[-1] in _SECRET_LAST_WORDS and len(words) <= _SHORT_NAME_WORDS:
        return True
    return any(pair == ("API", "KEY") for pair in itertools.pairwise(words))


def is_secret_env(name: str) -> bool:
    """Whether an environment variable name looks like it holds a secret (see module doc)."""
    if is_secret_name(name):
        return True
    for word in _words(name):
        if word in _ENV_HARMLESS_WORDS:
            continue
        if word.endswith(_ENV_SECRET_ENDINGS):
            return True
    return False


def is_secret_flag(arg: str) -> bool:
    """Whether ``arg`` (``--name``, without ``=value``) is a flag whose value is secret."""
    if not arg.startswith("--") or len(arg) <= 2:
        return False
    if arg in _NOT_SECRET_FLAGS:
        return False
    if arg in _SECRET_FLAGS or is_secret_name(arg):
        return True
    # argparse accepts an unambiguous prefix: ``--api-k`` is ``--api-key``
    return len(arg) >= _MIN_ABBREV and any(flag.startswith(arg) for flag in _SECRET_FLAGS)


def redact_env(env: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """A copy of ``env`` with secret-looking values replaced (and URL passwords in the rest)."""
    names = set(extra)
    return {
        k: (REDACTED if k in names or is_secret_env(k) else redact_text(v)) for k, v in env.items()
    }


def redact_argv(argv: Iterable[str], placeholder: str = REDACTED) -> list[str]:
    """A copy of ``argv``, one word for one word, with secret values replaced.

    The values of secret flags, ``SECRET_NAME=value`` words (``docker exec -e HF_TOKEN=...``),
    URL passwords and token-looking words are replaced by ``placeholder``.
    """
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            hide_next = False
            if not arg.startswith("--") or arg == "--":
                out.append(placeholder)
                continue
        if arg.startswith("--") and "=" in arg:
            name, _, _value = arg.partition("=")
            if is_secret_flag(name):
                out.append(f"{name}={placeholder}")
                continue
        elif is_secret_flag(arg):
            out.append(arg)
            hide_next = True
            continue
        elif not arg.startswith("-") and "=" in arg:
            name, _, _value = arg.partition("=")
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and is_secret_env(name):
                out.append(f"{name}={placeholder}")
                continue
        out.append(redact_text(arg, placeholder))
    return out


def redact_text(text: str, placeholder: str = REDACTED) -> str:
    """Replace secrets in free text: URL passwords, token-looking words, ``SECRET=value``
    assignments (``api_key='...'``, ``HF_TOKEN=...``) and the values of secret ``--flags``."""
    if not text:
        return text
    text = _URL_CREDENTIALS.sub(lambda m: m.group(1) + placeholder + m.group(3), text)
    text = _SECRET_IN_TEXT.sub(placeholder, text)
    text = _BEARER.sub(lambda m: m.group(1) + placeholder, text)

    def assignment(m: re.Match[str]) -> str:
        name, value = m.group("name"), m.group("value")
        if not (is_secret_env(name) or is_secret_name(name)) or value in ("None", "''", '""'):
            return m.group(0)
        if name.lower() == "authorization":
            return m.group(0)
        if value == placeholder or value.strip("'\"") == placeholder:
            return m.group(0)
        quote = value[0] if value[0] in "'\"" else ""
        return f"{name}{m.group('eq')}{quote}{placeholder}{quote}"

    if "=" in text or ":" in text:
        text = _ASSIGNMENT.sub(assignment, text)

    def flag_value(m: re.Match[str]) -> str:
        if not is_secret_flag(m.group("flag")) or m.group("value").startswith("--"):
            return m.group(0)
        return f"{m.group('flag')}{m.group('sep')}{placeholder}"

    if "--" in text:
        text = _FLAG_VALUE.sub(flag_value, text)
    return text


def redact_url(url: str) -> str:
    """``scheme://user:***@host/...``: a storage or server URL with its password hidden."""
    return _URL_CREDENTIALS.sub(lambda m: m.group(1) + REDACTED + m.group(3), url)


def redact_values(text: str, secrets: Iterable[str], placeholder: str = REDACTED) -> str:
    """``text`` with every occurrence of each known secret value replaced, then
    :func:`redact_text` (secret values shorter than 4 characters are left to the patterns)."""
    for value in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(value, placeholder)
    return redact_text(text, placeholder)


def redact_file(path: Path, secrets: Iterable[str] = ()) -> bool:
    """Rewrite the text file at ``path`` with its secrets redacted; whether it changed.

    For copies that are kept (a server's log in the artifacts): the values in ``secrets`` and
    everything :func:`redact_text` recognises are replaced. Missing or unreadable: unchanged.
    """
    try:
        raw = path.read_bytes()
    except OSError:
        return False
    text = raw.decode("utf-8", "surrogateescape")
    clean = "\n".join(redact_values(line, secrets) for line in text.split("\n"))
    if clean == text:
        return False
    tmp = path.with_name(path.name + ".redacting")
    try:
        tmp.write_bytes(clean.encode("utf-8", "surrogateescape"))
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True


def api_key_of(argv: Iterable[str]) -> str | None:
    """The value of ``--api-key`` in a server's argv (``--api-key K`` or ``--api-key=K``)."""
    args = list(argv)
    found: str | None = None
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if not (name.startswith("--api") and "--api-key".startswith(name) and len(name) >= 5):
            continue
        if eq:
            found = value
        elif i + 1 < len(args):
            found = args[i + 1]
    return found or None


def secret_values(argv: Iterable[str], env: Mapping[str, str]) -> set[str]:
    """The secret values of a launch: those :func:`redact_argv` and :func:`redact_env` hide."""
    args = list(argv)
    out: set[str] = set()
    for raw, shown in zip(args, redact_argv(args, placeholder="\0"), strict=True):
        if raw != shown:
            out.update(_differences(raw, shown))
    for name, value in env.items():
        if is_secret_env(name):
            out.add(value)
        else:
            out.update(_differences(value, redact_text(value, "\0")))
    return {v for v in out if v}


def _differences(raw: str, shown: str) -> list[str]:
    """The pieces of ``raw`` that ``shown`` replaced with NUL."""
    parts = shown.split("\0")
    if len(parts) == 1:
        return []
    pattern = "(.*?)".join(re.escape(p) for p in parts)
    m = re.fullmatch(pattern, raw, flags=re.S)
    return list(m.groups()) if m else [raw]


# --- the stored space text -------------------------------------------------------------------


def redact_space_text(text: str) -> str:
    """The space file's text with every secret value replaced by ``"<redacted>"``.

    Replaced in place, scalar by scalar (comments, layout and line numbers stay): the values of
    secret ``engine.env`` names, secret values in ``engine.extra_args`` and
    ``engine.launch_prefix`` (as :func:`redact_argv` judges them), and URL passwords and
    token-looking words in any other value. Text that is not YAML is redacted as free text.
    """
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return redact_text(text, PLACEHOLDER)
    if root is None:
        return text
    edits: dict[int, tuple[int, int, str | None, str | None]] = {}

    def scalar(node: Any, new: str) -> None:
        if new != node.value:
            edits[id(node)] = (node.start_mark.index, node.end_mark.index, new, node.style)

    def walk(node: Any, path: tuple[str, ...], seen: set[int]) -> None:
        if id(node) in seen:
            return
        seen = seen | {id(node)}
        if isinstance(node, yaml.ScalarNode):
            new = redact_text(node.value, PLACEHOLDER)
            if new != node.value and node.style in ("|", ">"):
                # a block of text: redacted line by line where it stands, lines kept
                edits[id(node)] = (node.start_mark.index, node.end_mark.index, None, node.style)
            else:
                scalar(node, new)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else ""
                if (
                    path == ("engine", "env")
                    and isinstance(value, yaml.ScalarNode)
                    and is_secret_env(str(name))
                    and value.value not in ("", PLACEHOLDER)
                ):
                    scalar(value, PLACEHOLDER)
                    continue
                walk(value, (*path, str(name)), seen)
        elif isinstance(node, yaml.SequenceNode):
            items = node.value
            if path in (("engine", "extra_args"), ("engine", "launch_prefix")) and all(
                isinstance(i, yaml.ScalarNode) for i in items
            ):
                shown = redact_argv([i.value for i in items], placeholder=PLACEHOLDER)
                for item, new in zip(items, shown, strict=True):
                    scalar(item, new)
                return
            for item in items:
                walk(item, path, seen)

    walk(root, (), set())
    out = text
    for start, end, new, _style in sorted(edits.values(), key=lambda e: e[0], reverse=True):
        span = out[start:end]
        if new is None:
            out = out[:start] + redact_text(span, PLACEHOLDER) + out[end:]
            continue
        head = re.match(r"(?:[&!][^\s]*\s+)*", span)
        keep = head.group(0) if head else ""
        tail = span[len(span.rstrip()) :]
        out = out[:start] + keep + _quoted(new) + tail + out[end:]
    return out


def _quoted(value: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is valid YAML)."""
    import json

    return json.dumps(value)


def has_placeholder(values: Iterable[str]) -> bool:
    return any(PLACEHOLDER in v for v in values)
