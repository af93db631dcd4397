"""Redaction of secrets (API keys, tokens, passwords) from anything that is recorded."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping

REDACTED = "***"

#: Words of a name (split at ``-``, ``_``, ``.``) that mark it secret on their own.
_SECRET_WORDS = frozenset(
    {
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "CREDENTIALS",
        "APIKEY",
        "AUTHORIZATION",
    }
)
#: Words that mark a short name secret when it ends with them (``HF_TOKEN``, ``--auth-token``,
#: but not ``--bucket-time-to-first-token``).
_SECRET_LAST_WORDS = frozenset({"TOKEN", "AUTH"})
_SHORT_NAME_WORDS = 4
#: Adjacent words that mark a name secret together (``API_KEY``, ``--access-key``).
_SECRET_PAIRS = frozenset(
    {("API", "KEY"), ("ACCESS", "KEY"), ("PRIVATE", "KEY"), ("SECRET", "KEY")}
)
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
_SECRET_IN_TEXT = re.compile(r"\b(hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_\-]{8,})\b")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable or flag name looks like it holds a secret.

    Judged by whole words, so ``HF_TOKEN`` and ``--api-key`` are secret while
    ``--speculative-num-draft-tokens``, ``--tokenizer-path`` and ``--speculative-token-map``
    are not.
    """
    words = [w for w in _WORD_SPLIT.split(name.upper()) if w]
    if any(w in _SECRET_WORDS for w in words):
        return True
    if words and words[-1] in _SECRET_LAST_WORDS and len(words) <= _SHORT_NAME_WORDS:
        return True
    return any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words))


def redact_env(env: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """A copy of ``env`` with secret-looking values replaced."""
    names = set(extra)
    return {k: (REDACTED if k in names or is_secret_name(k) else v) for k, v in env.items()}


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A copy of ``argv`` with the values of secret flags and token-looking words replaced."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if arg.startswith("--") and "=" in arg:
            name, _, _value = arg.partition("=")
            if name in _SECRET_FLAGS or is_secret_name(name):
                out.append(f"{name}={REDACTED}")
                continue
        if arg in _SECRET_FLAGS or (arg.startswith("--") and is_secret_name(arg)):
            out.append(arg)
            hide_next = True
            continue
        out.append(redact_text(arg))
    return out


def redact_text(text: str) -> str:
    """Replace token-looking words (``hf_...``, ``sk-...``) in free text."""
    return _SECRET_IN_TEXT.sub(REDACTED, text)
