"""Simulator profiles are data files; mistakes in them are named, not tracebacks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune._errors import ConfigError
from autotune._knobs import ServerConfig
from autotune.sim._model import SimModel
from autotune.sim._profile import PROFILE_DIR, list_profiles, load_profile


def test_shipped_profiles_load() -> None:
    names = list_profiles()
    assert {"rtxpro6000x8-kimi-k2.5", "h100-llama-3.1-8b"} <= set(names)
    for name in names:
        profile = load_profile(name)
        assert profile.default_workload.name == profile.default_workload_name
        assert profile.hardware.gpu_count >= 1


def test_unknown_name_suggests_the_close_one() -> None:
    with pytest.raises(ConfigError) as err:
        load_profile("rtxpro6000x8-kimi-k25")
    assert "unknown simulator profile 'rtxpro6000x8-kimi-k25'" in str(err.value)
    assert "did you mean 'rtxpro6000x8-kimi-k2.5'" in str(err.value)


def _copy(tmp_path: Path, edit) -> Path:  # type: ignore[no-untyped-def]
    data = yaml.safe_load((PROFILE_DIR / "h100-llama-3.1-8b.yaml").read_text())
    edit(data)
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_users_profile_file_works_and_changes_the_answer(tmp_path: Path) -> None:
    def faster_memory(data):  # type: ignore[no-untyped-def]
        data["name"] = "h200-llama-3.1-8b"
        data["hardware"]["mem_bw_tbs"] = 4.8  # an H200

    path = _copy(tmp_path, faster_memory)
    mine = SimModel(load_profile(path))
    shipped = SimModel(load_profile("h100-llama-3.1-8b"))
    config = ServerConfig()
    faster = mine.evaluate(config).output_tok_s
    slower = shipped.evaluate(config).output_tok_s
    assert faster is not None and slower is not None and faster > slower * 1.2
    assert mine.profile.name == "h200-llama-3.1-8b"


def test_a_typo_in_a_key_is_named_with_a_suggestion(tmp_path: Path) -> None:
    def typo(data):  # type: ignore[no-untyped-def]
        data["hardware"]["mem_bw_tb"] = data["hardware"].pop("mem_bw_tbs")

    with pytest.raises(ConfigError) as err:
        load_profile(_copy(tmp_path, typo))
    message = str(err.value)
    assert "mine.yaml:hardware.mem_bw_tb" in message
    assert "did you mean 'mem_bw_tbs'" in message


def test_a_wrong_type_is_named(tmp_path: Path) -> None:
    def wrong(data):  # type: ignore[no-untyped-def]
        data["model"]["layers"] = "thirty-two"

    with pytest.raises(ConfigError, match=r"model\.layers: expected an integer"):
        load_profile(_copy(tmp_path, wrong))


def test_unknown_allreduce_mode_and_missing_key(tmp_path: Path) -> None:
    def bad_mode(data):  # type: ignore[no-untyped-def]
        data["hardware"]["allreduce"]["nvlink_magic"] = {"protocols": []}

    with pytest.raises(ConfigError, match="unknown all-reduce mode 'nvlink_magic'"):
        load_profile(_copy(tmp_path, bad_mode))

    def missing(data):  # type: ignore[no-untyped-def]
        del data["model"]["hidden"]

    with pytest.raises(ConfigError, match=r"model\.hidden: missing key"):
        load_profile(_copy(tmp_path, missing))


def test_malformed_yaml_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("hardware: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_profile(path)


def test_a_profile_missing_an_allreduce_mode_is_refused_with_its_location(
    tmp_path: Path,
) -> None:
    """A mode a profile does not list would otherwise cost nothing and win every search."""

    def drop(data):  # type: ignore[no-untyped-def]
        del data["hardware"]["allreduce"]["mscclpp"]

    with pytest.raises(ConfigError) as err:
        load_profile(_copy(tmp_path, drop))
    message = str(err.value)
    assert "mine.yaml:hardware.allreduce" in message
    assert "missing all-reduce mode 'mscclpp'" in message
    assert "falls_back_to" in message


@pytest.mark.parametrize(
    ("mode", "where", "fragment"),
    [
        ({"falls_back_to": "nccl_fast", "why": "x"}, "falls_back_to", "cannot fall back to"),
        ({"falls_back_to": "mscclpp", "why": "x"}, "falls_back_to", "cannot fall back to"),
        ({"falls_back_to": "nccl"}, "why", "say why"),
        ({"falls_back_to": "custom", "why": "x"}, "falls_back_to", "falls back itself"),
        (
            {"falls_back_to": "nccl", "why": "x", "protocols": [{"alpha_us": 1, "us_per_kib": 1}]},
            "protocols",
            "costs what its fallback costs",
        ),
        ({"extra_memory_gib": 0.2}, "", "needs protocols"),
    ],
)
def test_a_bad_fallback_is_named(tmp_path: Path, mode: dict, where: str, fragment: str) -> None:  # type: ignore[type-arg]
    def edit(data):  # type: ignore[no-untyped-def]
        data["hardware"]["allreduce"]["mscclpp"] = mode
        data["hardware"]["allreduce"]["custom"] = {"falls_back_to": "nccl", "why": "PCIe only"}

    with pytest.raises(ConfigError) as err:
        load_profile(_copy(tmp_path, edit))
    message = str(err.value)
    assert f"hardware.allreduce.mscclpp{'.' + where if where else ''}:" in message
    assert fragment in message


def test_a_mode_that_falls_back_costs_and_logs_its_fallback(tmp_path: Path) -> None:
    """Custom all-reduce switched off (SGLang does so on more than two PCIe-only GPUs): the
    server runs NCCL at NCCL's speed and says so at start-up."""

    def four(data):  # type: ignore[no-untyped-def]
        data["hardware"]["gpu_count"] = 4

    def pcie(data):  # type: ignore[no-untyped-def]
        four(data)
        why = "more than two PCIe-only GPUs"
        data["hardware"]["allreduce"]["custom"] = {"falls_back_to": "nccl", "why": why}

    model = SimModel(load_profile(_copy(tmp_path, pcie)))
    custom = ServerConfig(tp_size=4, allreduce="custom")
    nccl = ServerConfig(tp_size=4, allreduce="nccl")
    assert model.evaluate(custom).output_tok_s == model.evaluate(nccl).output_tok_s
    own = SimModel(load_profile(_copy(tmp_path, four)))
    assert own.evaluate(custom).output_tok_s != own.evaluate(nccl).output_tok_s
    lines = [line for phase in model.plan_startup(custom).phases for line in phase.lines]
    assert any("falling back to nccl" in line and "PCIe-only" in line for line in lines)


def test_fp8_weights_need_an_fp8_throughput_and_use_it(tmp_path: Path) -> None:
    def fp8(data):  # type: ignore[no-untyped-def]
        data["model"]["compute_dtype"] = "fp8"

    with pytest.raises(ConfigError, match=r"model\.compute_dtype: the hardware gives no fp8"):
        load_profile(_copy(tmp_path, fp8))

    def fp8_hw(data):  # type: ignore[no-untyped-def]
        fp8(data)
        data["hardware"]["fp8_tflops"] = 1979.0

    profile = load_profile(_copy(tmp_path, fp8_hw))
    assert profile.hardware.tflops("fp8") == pytest.approx(
        2 * profile.hardware.tflops("bf16"), rel=0.01
    )
