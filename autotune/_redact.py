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
* it looks like a token by itself (``hf_...``, ``sk-...``, ``ghp_...``, ``github_pat_...``).

The environment of a launch (a space's ``engine.env``) is judged by default-deny: a value is kept
in what is stored or shown only when its name is known to be data (:func:`is_safe_env`:
:data:`SAFE_ENV_NAMES` and the prefixes :data:`SAFE_ENV_PREFIXES`, such as
``CUDA_VISIBLE_DEVICES`` or ``NCCL_*``, and not a secret-looking name such as
``SGLANG_API_KEY``); every other value (``GITHUB_PAT``, ``MY_SETTING``) is redacted, whatever its
name or look. The names stay: the record still says which variables the server had.

Values known to be secret (the API key of a launch, secret environment values) are also
replaced wherever they occur in a text, such as a server's log (:func:`redact_values`).

The space file is stored as a normalised dump of its YAML (:func:`redact_space_text`): its
comments dropped (a commented-out ``# HF_TOKEN: hf_...`` line is not kept), its secret values
and every ``engine.env`` value of a name that is not safe replaced by :data:`PLACEHOLDER`. A
resumed study parses it as it parsed the file, and takes the redacted values again from the
original file or the environment; the original text stays only in the user's own file.
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
_SECRET_IN_TEXT = re.compile(
    r"\b(hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_\-]{8,}|gh[pousr]_[A-Za-z0-9]{8,}"
    r"|github_pat_[A-Za-z0-9_]{8,}|glpat-[A-Za-z0-9_\-]{8,}|xox[abprs]-[A-Za-z0-9\-]{8,})\b"
)
#: Environment names whose values are data, not secrets: kept in records and shown (see
#: :func:`is_safe_env`). Any other name's value is redacted.
SAFE_ENV_NAMES = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "TOKENIZERS_PARALLELISM",
        "PYTHONUNBUFFERED",
        "PYTHONHASHSEED",
        "PYTHONFAULTHANDLER",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_HUB_OFFLINE",
        "HF_HUB_ENABLE_HF_TRANSFER",
        "HF_HUB_DISABLE_TELEMETRY",
        "HF_DATASETS_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "TRANSFORMERS_CACHE",
    }
)
#: Prefixes of environment names whose values are data: the engines' and libraries' switches
#: (``NCCL_ALGO``, ``SGLANG_ENABLE_SPEC_V2``, ``TORCH_CUDA_ARCH_LIST``, ``OMP_NUM_THREADS``). A
#: name with such a prefix that looks secret (``SGLANG_API_KEY``, ``VLLM_API_KEY``) is not safe.
SAFE_ENV_PREFIXES = (
    "CUDA_",
    "NCCL_",
    "NVSHMEM_",
    "SGLANG_",
    "SGL_",
    "VLLM_",
    "TORCH_",
    "TORCHINDUCTOR_",
    "PYTORCH_",
    "FLASHINFER_",
    "TRITON_",
    "OMP_",
    "MKL_",
)
#: A value of an environment name that is neither safe nor secret-looking is replaced in a
#: server's log only from this length on (shorter values, ``1`` or ``fast``, are ordinary words
#: of a log; they are still never recorded as the variable's value).
_UNKNOWN_ENV_MIN_CHARS = 8
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


def is_safe_env(name: str) -> bool:
    """Whether an environment variable's value may be stored and shown (default-deny).

    True for the names of :data:`SAFE_ENV_NAMES` and those starting with one of
    :data:`SAFE_ENV_PREFIXES`, unless the name looks secret (:func:`is_secret_env`); every
    other value is redacted.
    """
    if is_secret_env(name):
        return False
    return name in SAFE_ENV_NAMES or name.startswith(SAFE_ENV_PREFIXES)


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
    """A copy of ``env`` with every value replaced but those of safe names (:func:`is_safe_env`),
    which keep their value with URL passwords and token-looking words replaced; ``extra``:
    names to redact even if safe."""
    names = set(extra)
    return {
        k: (redact_text(v) if k not in names and is_safe_env(k) else REDACTED)
        for k, v in env.items()
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
    """The secret values of a launch, to replace in a server's log: those :func:`redact_argv`
    hides, and the environment values :func:`redact_env` hides (a value of a name neither safe
    nor secret-looking only from :data:`_UNKNOWN_ENV_MIN_CHARS` characters on)."""
    args = list(argv)
    out: set[str] = set()
    for raw, shown in zip(args, redact_argv(args, placeholder="\0"), strict=True):
        if raw != shown:
            out.update(_differences(raw, shown))
    for name, value in env.items():
        if is_secret_env(name):
            out.add(value)
        else:
            if not is_safe_env(name) and len(value) >= _UNKNOWN_ENV_MIN_CHARS:
                out.add(value)
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
    """The space file's text as it is stored: a normalised YAML dump of its data, secrets
    replaced by ``"<redacted>"``.

    Comments are dropped (a commented-out ``# HF_TOKEN: hf_...`` is not kept) and the layout is
    YAML's own; the data is the file's, so the dump parses to the same space. Replaced: every
    ``engine.env`` value of a name that is not safe (:func:`is_safe_env`, default-deny), secret
    values in ``engine.extra_args`` and ``engine.launch_prefix`` (as :func:`redact_argv` judges
    them), and URL passwords and token-looking words in any other value or key. The dump of a
    dump is itself. Text that is not YAML is redacted as free text, comment lines dropped.
    """
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        kept = [line for line in text.split("\n") if not line.lstrip().startswith("#")]
        return redact_text("\n".join(kept), PLACEHOLDER)
    if data is None:
        return ""
    return yaml.safe_dump(
        _redact_data(data, ()), sort_keys=False, allow_unicode=True, default_flow_style=False
    )


def _redact_data(node: Any, path: tuple[str, ...]) -> Any:
    """A copy of parsed YAML ``node`` (at ``path``) with its secrets replaced (see
    :func:`redact_space_text`)."""
    if isinstance(node, str):
        return redact_text(node, PLACEHOLDER)
    if isinstance(node, dict):
        out: dict[Any, Any] = {}
        for key, value in node.items():
            name = redact_text(key, PLACEHOLDER) if isinstance(key, str) else key
            if path == ("engine", "env") and not is_safe_env(str(key)):
                keep = value in ("", None, PLACEHOLDER)
                out[name] = value if keep else PLACEHOLDER
                continue
            out[name] = _redact_data(value, (*path, str(key)))
        return out
    if isinstance(node, list):
        if path in (("engine", "extra_args"), ("engine", "launch_prefix")) and all(
            isinstance(i, str) for i in node
        ):
            return redact_argv(node, placeholder=PLACEHOLDER)
        return [_redact_data(item, path) for item in node]
    return node


def has_placeholder(values: Iterable[str]) -> bool:
    return any(PLACEHOLDER in v for v in values)
