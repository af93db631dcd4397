"""Redaction of secrets: which names and values are secret, and the stored space text."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune._launch import LaunchSpec
from autotune._redact import (
    PLACEHOLDER,
    REDACTED,
    api_key_of,
    is_safe_env,
    is_secret_env,
    is_secret_flag,
    redact_argv,
    redact_env,
    redact_file,
    redact_space_text,
    redact_text,
    redact_url,
    secret_values,
)


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "OPENAI_KEY",
        "OPENAI_API_KEY",
        "DB_PASS",
        "DB_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "MYTOKEN",
        "WANDB_APIKEY",
    ],
)
def test_secret_environment_names(name: str) -> None:
    assert is_secret_env(name)
    assert redact_env({name: "s3cr3t-value"}) == {name: REDACTED}


@pytest.mark.parametrize(
    "name",
    ["TOKENIZERS_PARALLELISM", "NCCL_ALGO", "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG", "PATH", "PWD"],
)
def test_harmless_environment_names(name: str) -> None:
    assert not is_secret_env(name)


@pytest.mark.parametrize(
    "name",
    [
        "CUDA_VISIBLE_DEVICES",
        "NCCL_ALGO",
        "NCCL_DEBUG",
        "SGLANG_ENABLE_SPEC_V2",
        "TORCH_CUDA_ARCH_LIST",
        "PYTORCH_CUDA_ALLOC_CONF",
        "FLASHINFER_WORKSPACE_BASE",
        "OMP_NUM_THREADS",
        "TOKENIZERS_PARALLELISM",
    ],
)
def test_safe_environment_names_keep_their_values(name: str) -> None:
    assert is_safe_env(name)
    assert redact_env({name: "x"}) == {name: "x"}


@pytest.mark.parametrize(
    "name",
    ["GITHUB_PAT", "MY_SETTING", "PATH", "PWD", "SGLANG_API_KEY", "VLLM_API_KEY", "HF_TOKEN"],
)
def test_every_other_environment_value_is_redacted(name: str) -> None:
    """Default-deny: a name not known to be data has its value hidden, whatever it looks like."""
    assert not is_safe_env(name)
    assert redact_env({name: "plain-value-123"}) == {name: REDACTED}
    launch = LaunchSpec(argv=("serve",), env={name: "plain-value-123"}, port=1)
    assert "plain-value-123" not in launch.display() and "plain-value-123" in launch.secrets()


@pytest.mark.parametrize(
    "flag",
    [
        "--api-key",
        "--admin-api-key",
        "--hf-token",
        "--auth-token",
        "--db-pass",
        "--password",
        "--ssl-keyfile-password",
        "--client-secret",
        "--access-key",
        "--api-k",  # argparse's abbreviation of --api-key
    ],
)
def test_secret_flags(flag: str) -> None:
    assert is_secret_flag(flag)
    assert redact_argv([flag, "v4lue"]) == [flag, REDACTED]
    assert redact_argv([f"{flag}=v4lue"]) == [f"{flag}={REDACTED}"]


@pytest.mark.parametrize(
    "flag",
    [
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
        "--speculative-token-map",
        "--tokenizer-path",
        "--tokenizer-mode",
        "--skip-tokenizer-init",
        "--max-total-tokens",
        "--max-prefill-tokens",
        "--bucket-time-to-first-token",
        "--kv-cache-dtype",
        "--ssl-keyfile",
        "--enable-cache-report",
        "--host",
        "--port",
    ],
)
def test_harmless_flags(flag: str) -> None:
    assert not is_secret_flag(flag)
    assert redact_argv([flag, "4"]) == [flag, "4"]


def test_argv_redaction_keeps_one_word_per_word() -> None:
    argv = [
        "docker", "exec", "-e", "HF_TOKEN=hf-secret-1", "box",
        "python3", "-m", "sglang.launch_server",
        "--api-key", "K-123456",
        "--tokenizer-path", "https://alice:pw-9876@hub.example/tok",
        "--enable-metrics",
        "--hf-token", "--trust-remote-code",  # a flag with no value after it: nothing hidden
    ]  # fmt: skip
    shown = redact_argv(argv)
    assert len(shown) == len(argv)
    text = " ".join(shown)
    for secret in ("hf-secret-1", "K-123456", "pw-9876"):
        assert secret not in text
    assert "HF_TOKEN=***" in shown and "--trust-remote-code" in shown
    assert "https://alice:***@hub.example/tok" in shown


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("server_args=ServerArgs(model_path='m', api_key='K-123456', tp_size=1)", "K-123456"),
        ("launching with --api-key K-123456 --port 1", "K-123456"),
        ("postgresql://tuner:pg-pw-42@db.example/studies", "pg-pw-42"),
        ("HF_TOKEN=abc-token-1 python -m x", "abc-token-1"),
        ("Authorization: Bearer K-123456", "K-123456"),
        ("token hf_AbCdEfGhIjKlMn in a line", "hf_AbCdEfGhIjKlMn"),
        ("key sk-abcdefgh12345 in a line", "sk-abcdefgh12345"),
    ],
)
def test_text_redaction(text: str, secret: str) -> None:
    assert secret not in redact_text(text)


def test_text_redaction_leaves_ordinary_lines() -> None:
    line = "max_total_tokens=5000, speculative_eagle_topk=4, tokenizer_path='m', api_key=None"
    assert redact_text(line) == line


def test_storage_url() -> None:
    assert redact_url("postgresql://u:pw@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact_url("sqlite:///studies/x.db") == "sqlite:///studies/x.db"


def test_api_key_of_argv() -> None:
    assert api_key_of(["--api-key", "K1"]) == "K1"
    assert api_key_of(["--api-key=K2"]) == "K2"
    assert api_key_of(["--api-k", "K3"]) == "K3"
    assert api_key_of(["--admin-api-key", "A", "--port", "1"]) is None


def test_launch_spec_carries_the_key_but_never_shows_it() -> None:
    launch = LaunchSpec(
        argv=("python", "-m", "x", "--api-key", "K-123456"),
        env={"HF_TOKEN": "hf-secret-1", "NCCL_DEBUG": "WARN"},
        port=1,
        api_key="K-123456",
    )
    assert launch.auth_headers == {"Authorization": "Bearer K-123456"}
    assert "K-123456" not in repr(launch)
    shown = launch.display()
    assert "K-123456" not in shown and "hf-secret-1" not in shown and "NCCL_DEBUG=WARN" in shown
    assert {"K-123456", "hf-secret-1"} <= launch.secrets()


def test_secret_values_of_a_launch() -> None:
    found = secret_values(
        ["--api-key", "K1", "--u", "http://a:pw@h"], {"HF_TOKEN": "tok", "URL": "pg://u:p2@h"}
    )
    # a value of a name not known to be safe is hidden whole (from 8 characters on)
    assert found == {"K1", "pw", "tok", "p2", "pg://u:p2@h"}


def test_redact_file(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        "[2026] server_args=ServerArgs(api_key='K-123456', hf_token='hf-secret-1')\n"
        "[2026] loaded from https://u:pw-9876@hub/x\n"
        "[2026] planted-9 appears as is\n"
    )
    assert redact_file(log, {"planted-9"})
    text = log.read_text()
    for secret in ("K-123456", "hf-secret-1", "pw-9876", "planted-9"):
        assert secret not in text
    assert text.count("\n") == 3
    assert not redact_file(log, {"planted-9"})  # nothing left to change
    assert not redact_file(tmp_path / "missing.log")


SPACE = """\
name: s   # a comment
engine:
  kind: sim
  extra_args: [--api-key, K-123456, "--tokenizer-path=https://alice:pw-9876@hub/x"]
  launch_prefix:
    - docker
    - HF_TOKEN=hf-secret-2
  env:
    HF_TOKEN: &tok hf-secret-1
    COPY: *tok
    DB_PASS: 'db''pass'
    GITHUB_PAT: ghp_AbCdEfGh12345678
    NCCL_DEBUG: WARN
    # OLD_TOKEN: hf_CommentedOut1234
description: |
  uses hf_AbCdEfGhIjKl
"""


def test_space_text_is_a_normalised_dump_without_secrets_or_comments() -> None:
    out = redact_space_text(SPACE)
    for secret in (
        "K-123456",
        "pw-9876",
        "hf-secret-1",
        "hf-secret-2",
        "db'pass",
        "hf_AbCd",
        "ghp_",
        "hf_Commented",
    ):
        assert secret not in out
    assert "#" not in out and "comment" not in out
    data = yaml.safe_load(out)
    engine = data["engine"]
    assert engine["extra_args"] == [
        "--api-key",
        PLACEHOLDER,
        f"--tokenizer-path=https://alice:{PLACEHOLDER}@hub/x",
    ]
    assert engine["launch_prefix"] == ["docker", f"HF_TOKEN={PLACEHOLDER}"]
    assert engine["env"] == {
        "HF_TOKEN": PLACEHOLDER,
        "COPY": PLACEHOLDER,  # not a known name: default-deny
        "DB_PASS": PLACEHOLDER,
        "GITHUB_PAT": PLACEHOLDER,
        "NCCL_DEBUG": "WARN",
    }
    assert redact_space_text(out) == out  # a second pass changes nothing


def test_space_text_without_secrets_keeps_its_data() -> None:
    text = (Path(__file__).resolve().parents[1] / "search_spaces" / "eagle3.yaml").read_text()
    out = redact_space_text(text)
    assert yaml.safe_load(out) == yaml.safe_load(text)
    assert "#" in text and "#" not in out
