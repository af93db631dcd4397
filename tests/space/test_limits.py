"""Input limits of the YAML loader and the space parser: alias bombs, deep nesting, huge texts
and numbers are refused with a located message instead of exhausting memory or the stack."""

from __future__ import annotations

import pytest
import yaml

from autotune._document import (
    MAX_DEPTH,
    MAX_EXPANDED,
    format_path,
    load_document,
    safe_data,
)
from autotune._errors import ConfigError
from autotune.space import parse_space

SPEC = "engine: {kind: sim, model_path: m, sim: {profile: h100-llama-3.1-8b}}\n"


def _bomb(levels: int = 9) -> str:
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def _refused(text: str, *phrases: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_document(text, source="s.yaml")
    message = str(info.value)
    for phrase in phrases:
        assert phrase in message, message
    return message


def test_alias_bomb_is_refused_before_it_is_expanded() -> None:
    _refused(_bomb(), "s.yaml:", f"expand to more than {MAX_EXPANDED:,} values")


def test_alias_bomb_through_merge_keys_is_refused() -> None:
    lines = ["m0: &m0 {a: [x, x, x, x, x, x, x, x, x, x]}"]
    for i in range(1, 12):
        refs = ", ".join(f"k{j}: *m{i - 1}" for j in range(10))
        lines.append(f"m{i}: &m{i} {{<<: *m{i - 1}, {refs}}}")
    _refused("\n".join(lines) + "\n", "aliases (*name) expand")


def test_a_few_aliases_still_work() -> None:
    doc = load_document("a: &x {b: [1, 2]}\nc: *x\nd: {<<: *x, e: 3}\n", source="s.yaml")
    assert doc.data == {"a": {"b": [1, 2]}, "c": {"b": [1, 2]}, "d": {"b": [1, 2], "e": 3}}


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 1000 + "]" * 1000 + "\n",
        "a: " + "{b: " * 100_000 + "1" + "}" * 100_000 + "\n",
        "".join(" " * i + f"k{i}:\n" for i in range(1000)),
        "".join("  " * i + "-\n" for i in range(1000)),
    ],
    ids=["flow lists", "flow mappings", "block mappings", "block lists"],
)
def test_deep_nesting_is_refused_without_recursion(text: str) -> None:
    _refused(text, f"nesting deeper than {MAX_DEPTH} levels")


def test_nesting_at_the_limit_is_read() -> None:
    doc = load_document("a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n", source="s")
    assert isinstance(doc.data["a"], list)


def test_huge_texts_and_values() -> None:
    _refused("a: " + "x" * (2 * 1024 * 1024), "s.yaml:1", "more than 1,048,576 characters")
    _refused("a: [" + "1, " * 60_000 + "1]\n", "more than 50,000 values")
    message = _refused("a: " + "9" * 5000 + "\n", "s.yaml:1 (a)", "cannot read the value")
    assert len(message) < 500
    _refused("a: 2024-13-45\n", "s.yaml:1 (a)", "month must be in 1..12")


def test_unprintable_keys_are_escaped_in_locations() -> None:
    assert format_path(("env", "A\x00B")) == "env.A\\x00B"
    assert format_path(("k" * 200,)).endswith("...")


def test_safe_data_has_the_same_limits() -> None:
    assert safe_data("a: 1\n", source="w.yaml") == {"a": 1}
    assert safe_data("", source="w.yaml") is None
    with pytest.raises(ConfigError, match="aliases"):
        safe_data(_bomb(), source="w.yaml")
    with pytest.raises(yaml.YAMLError):
        safe_data("a: [\n", source="w.yaml")


def test_strings_are_bounded_and_free_of_nul() -> None:
    long_path = SPEC.replace("model_path: m", "model_path: " + "m" * 5000)
    with pytest.raises(ConfigError, match=r"engine.model_path\): is 5,000 characters long"):
        parse_space(long_path + "parameters:\n  page_size: {choices: [1, 16]}\n")
    with pytest.raises(ConfigError, match=r"parameters.attention_backend.choices\[1\]"):
        parse_space(SPEC + 'parameters:\n  attention_backend: {choices: [fa3, "x\\0"]}\n')


def test_a_description_is_bounded_and_shown_cut() -> None:
    text = (
        "description: "
        + "word " * 3000
        + "\n"
        + SPEC
        + "parameters:\n  page_size: {choices: [1, 16]}\n"
    )
    space = parse_space(text)
    summary = space.summary()
    assert "[...]" in summary and len(summary) < 5000


def test_size_of_a_long_range_that_a_condition_names() -> None:
    text = SPEC + (
        "parameters:\n"
        "  max_running_requests: {type: int, low: 1, high: 900000}\n"
        "  page_size: {choices: [1, 16], when: {max_running_requests: [8, 64]}}\n"
    )
    space = parse_space(text)
    # 2 values with page_size's two choices, the other 899998 alone
    assert space.size() == 2 * 2 + 899_998


def test_size_grouping_agrees_with_counting_every_value() -> None:
    text = SPEC + (
        "parameters:\n"
        "  max_running_requests: {type: int, low: 1, high: 12}\n"
        "  page_size: {choices: [1, 16, 32], when: {max_running_requests: [3, 4]}}\n"
        "  chunked_prefill_size: {choices: [512, 1024], when: {max_running_requests: 4}}\n"
    )
    space = parse_space(text)
    # 10 values alone, 3 -> 3 page sizes, 4 -> 3 page sizes x 2 chunk sizes
    assert space.size() == 10 + 3 + 6
