"""Contract with SGLang's real argument parsers (0.5.23 and 0.5.3).

Every command line the SGLang adapter builds for hundreds of proposals of
search_spaces/eagle3.yaml is parsed by that release's own ``ServerArgs.add_cli_args`` parser, and
the parsed fields must equal the recorded configuration. A release with ``sglang serve`` is
launched through its own console script, which runs the command the tuner builds. The known
flag table is checked against each parser flag by flag, and the negative facts (flags a release
refuses) are checked too.

The parsers are installed by ``.ci/install-sglang-parsers.sh DEST`` (no GPU dependencies); the
tests find them in ``AUTOTUNE_SGLANG_PARSERS`` (default ``<repo>/.ci-venvs``) and skip when they are
absent, unless ``AUTOTUNE_REQUIRE_CONTRACT=1``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from autotune._knobs import ServerConfig
from autotune._workload import WorkloadSpec
from autotune.engines import EngineSpec, FlagSet, LaunchSpec, SGLangEngine
from autotune.engines.sglang._dialects import ABSENT, known_options

pytestmark = pytest.mark.sglang_contract

REPO = Path(__file__).resolve().parents[3]

RELEASES = ("0.5.23", "0.5.3")
#: Where each release's parser stores what autotune sets (read from the parsers, not the adapter).
GRAPH_BS_FIELD = {"0.5.23": "cuda_graph_max_bs_decode", "0.5.3": "cuda_graph_max_bs"}
TP_FIELD = {"0.5.23": "tp_size", "0.5.3": "tensor_parallel_size"}
MARKER = "CONTRACT-RESULTS "
#: Workload concurrencies: below and above SGLang's cap of 48 running requests under speculation.
CONCURRENCIES = (4, 64)

#: Parses many argvs with one release's own parser; JSON list on stdin, results on one line.
PARSE_SCRIPT = r"""
import argparse, contextlib, io, json, sys
from sglang.srt.server_args import ServerArgs
parser = argparse.ArgumentParser(prog="launch_server")
ServerArgs.add_cli_args(parser)
results = []
for argv in json.load(sys.stdin):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
        results.append({"code": 0, "ns": vars(ns), "stderr": err.getvalue()})
    except SystemExit as e:
        results.append({"code": e.code, "ns": None, "stderr": err.getvalue()})
print("MARKER" + json.dumps(results, default=str))
""".replace("MARKER", MARKER)


@dataclass(frozen=True)
class Release:
    version: str
    pythonpath: str

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": self.pythonpath}

    def parse(self, argvs: Sequence[Sequence[str]]) -> list[dict[str, Any]]:
        done = subprocess.run(
            [sys.executable, "-c", PARSE_SCRIPT],
            input=json.dumps([list(a) for a in argvs]),
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith(MARKER)]
        assert lines, f"parser run failed ({done.returncode}): {done.stderr[-2000:]}"
        results: list[dict[str, Any]] = json.loads(lines[-1][len(MARKER) :])
        assert len(results) == len(argvs)
        return results


def _parsers_root() -> Path:
    return Path(os.environ.get("AUTOTUNE_SGLANG_PARSERS") or REPO / ".ci-venvs")


@pytest.fixture(scope="module", params=RELEASES)
def release(request: pytest.FixtureRequest) -> Release:
    version: str = request.param
    root = _parsers_root()
    package, deps = root / f"sglang-{version}", root / f"deps-{version}"
    if not (package / "sglang" / "srt" / "server_args.py").is_file():
        message = (
            f"SGLang {version}'s parser is not installed under {root}: "
            f"run .ci/install-sglang-parsers.sh {root}"
        )
        if os.environ.get("AUTOTUNE_REQUIRE_CONTRACT", "") not in ("", "0", "false"):
            pytest.fail(message)
        pytest.skip(message)
    return Release(version, os.pathsep.join([str(package), str(deps)]))


@pytest.fixture(scope="module")
def engine(release: Release) -> SGLangEngine:
    """An adapter that detects the release behind a launch prefix, as with ``docker exec``."""
    spec = EngineSpec(
        kind="sglang",
        model_path="/models/kimi",
        draft_model_path="/models/eagle3",
        tp_size=8,
        python=sys.executable,
        launch_prefix=("env", f"PYTHONPATH={release.pythonpath}"),
    )
    return SGLangEngine(spec)


@pytest.fixture(scope="module")
def detected(engine: SGLangEngine) -> FlagSet:
    return engine.flagset()


@pytest.fixture(scope="module")
def proposals() -> list[ServerConfig]:
    return _proposals()


@pytest.fixture(scope="module")
def parsed(
    release: Release, engine: SGLangEngine, proposals: list[ServerConfig]
) -> dict[int, list[tuple[ServerConfig, LaunchSpec, dict[str, Any]]]]:
    """Every proposal launched for each concurrency, parsed by the release's parser (one run)."""
    proposals = [c for c in proposals if engine.precheck(c) is None]  # 0.5.3: no adaptive
    launches = {
        concurrency: [
            engine.build_launch(c, port=31234, workload=WorkloadSpec(concurrency=concurrency))
            for c in proposals
        ]
        for concurrency in CONCURRENCIES
    }
    argvs = [_server_argv(x.argv) for runs in launches.values() for x in runs]
    results = iter(release.parse(argvs))
    return {
        concurrency: [(c, x, next(results)) for c, x in zip(proposals, runs, strict=True)]
        for concurrency, runs in launches.items()
    }


def _proposals() -> list[ServerConfig]:
    """Hundreds of proposals of the seed space, plus the knobs and modes it does not tune."""
    from autotune.space import load_space

    space = load_space(REPO / "search_spaces" / "eagle3.yaml")
    configs = [space.config_for(p) for p in space.sample(300, seed=7)]
    configs.append(space.baseline_config())
    base = configs[0]
    for mode in ("nccl_ring", "nccl_symm", "mscclpp", "custom", "flashinfer_fusion"):
        configs.append(base.replace(allreduce=mode))
    configs += [
        base.replace(disable_cuda_graph=True, cuda_graph_max_bs=None),
        base.replace(max_running_requests=96, chunked_prefill_size=8192, page_size=16),
        base.replace(attention_backend="flashinfer", chunked_prefill_size=-1),
        base.replace(speculative_num_steps=None, speculative_eagle_topk=None).replace(
            speculative_num_draft_tokens=None, mem_fraction_static=None
        ),
    ]
    chain = base.replace(speculative_num_steps=3, speculative_eagle_topk=1)
    chain = chain.replace(speculative_num_draft_tokens=4)
    configs += [chain, chain.replace(speculative_adaptive=True)]
    # every algorithm SGLang has, with and without the numbers
    for algorithm in ("EAGLE", "NEXTN", "STANDALONE", "NGRAM"):
        configs += [
            base.replace(speculative_algorithm=algorithm),
            base.replace(speculative_algorithm=algorithm, speculative_num_steps=None).replace(
                speculative_eagle_topk=None, speculative_num_draft_tokens=None
            ),
        ]
    return configs


def _expected(config: ServerConfig, version: str, concurrency: int) -> dict[str, Any]:
    """The parser fields a launch of ``config`` must produce, written from SGLang's semantics."""
    spec = config.speculative
    mode = config.allreduce
    running = config.max_running_requests
    if running is None and spec and concurrency > 48:
        running = concurrency
    # NGRAM loads no draft model, and SGLang sets its top-k to the n-gram BFS breadth (10 unless
    # given), whatever --speculative-eagle-topk says
    ngram = config.speculative_algorithm == "NGRAM"
    topk = config.speculative_eagle_topk if spec else None
    out: dict[str, Any] = {
        "model_path": "/models/kimi",
        "host": "127.0.0.1",
        "port": 31234,
        TP_FIELD[version]: config.tp_size,
        "speculative_algorithm": config.speculative_algorithm if spec else None,
        "speculative_draft_model_path": "/models/eagle3" if spec and not ngram else None,
        "speculative_num_steps": config.speculative_num_steps if spec else None,
        "speculative_eagle_topk": None if ngram else topk,
        "speculative_ngram_max_bfs_breadth": topk if ngram and topk is not None else 10,
        "speculative_num_draft_tokens": config.speculative_num_draft_tokens if spec else None,
        GRAPH_BS_FIELD[version]: config.cuda_graph_max_bs,
        "mem_fraction_static": config.mem_fraction_static,
        "max_running_requests": running,
        "chunked_prefill_size": config.chunked_prefill_size,
        "attention_backend": config.attention_backend,
        "page_size": config.page_size,
        "enable_metrics": True,
        "disable_custom_all_reduce": mode in ("nccl", "nccl_tree", "nccl_ring"),
        "enable_torch_symm_mem": mode == "torch_symm_mem",
        "enable_symm_mem": mode == "nccl_symm",
        "enable_mscclpp": mode == "mscclpp",
    }
    if version == "0.5.23":
        out["speculative_adaptive"] = bool(config.speculative_adaptive)
        graphs = "disabled" if config.disable_cuda_graph else None
        out["cuda_graph_backend_decode"] = graphs
        out["cuda_graph_backend_prefill"] = graphs
        out["disable_cuda_graph"] = False
        out["flashinfer_allreduce_fusion_backend"] = "auto" if mode == "flashinfer_fusion" else None
        out["enforce_disable_flashinfer_allreduce_fusion"] = mode != "flashinfer_fusion"
        out["enable_flashinfer_allreduce_fusion"] = False
    else:
        out["disable_cuda_graph"] = config.disable_cuda_graph
        out["enable_flashinfer_allreduce_fusion"] = mode == "flashinfer_fusion"
    return out


def _engine(release: Release) -> SGLangEngine:
    """An adapter that spells the release from autotune's table, without detection."""
    spec = EngineSpec(
        kind="sglang",
        model_path="/models/kimi",
        draft_model_path="/models/eagle3",
        tp_size=8,
        sglang_version=release.version,
    )
    return SGLangEngine(spec)


def _server_argv(argv: Sequence[str]) -> list[str]:
    """What follows ``sglang serve`` or ``-m sglang.launch_server`` in ``argv``."""
    words = list(argv)
    if "serve" in words and words[words.index("serve") - 1].endswith("/sglang"):
        return words[words.index("serve") + 1 :]
    i = words.index("sglang.launch_server")
    assert words[i - 1] == "-m"
    return words[i + 1 :]


#: Releases whose package has ``sglang serve`` (read from the packages: ``sglang/cli/serve.py``).
SERVE_RELEASES = ("0.5.23",)


def test_the_launch_uses_the_entrypoint_the_release_recommends(
    release: Release, engine: SGLangEngine, detected: FlagSet
) -> None:
    launch = engine.build_launch(ServerConfig(), port=31234)
    prefix = ["env", f"PYTHONPATH={release.pythonpath}", sys.executable]
    if release.version in SERVE_RELEASES:
        script = _parsers_root() / f"sglang-{release.version}" / "bin" / "sglang"
        assert detected.serve_script == str(script)
        assert list(launch.argv[:5]) == [*prefix, str(script), "serve"]
    else:
        assert detected.serve_script is None
        assert list(launch.argv[:5]) == [*prefix, "-m", "sglang.launch_server"]
    # autotune's table knows no installation's script: the module runs in every release.
    by_table = _engine(release).build_launch(ServerConfig(), port=31234)
    assert list(by_table.argv[1:3]) == ["-m", "sglang.launch_server"]


def test_sglang_serve_starts_with_the_argv_the_tuner_builds(
    release: Release, engine: SGLangEngine, proposals: list[ServerConfig]
) -> None:
    if release.version not in SERVE_RELEASES:
        pytest.skip(f"SGLang {release.version} has no sglang serve")
    launch = engine.build_launch(proposals[0], port=31234)
    # The whole command, through the prefix and interpreter, asked for its help: SGLang's
    # console script dispatches it to the language-model server and prints that parser's usage.
    done = subprocess.run(
        [*launch.argv, "--model-type", "llm", "--help"],
        env={**os.environ, **launch.env},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, (
        f"sglang serve did not run (its dependencies come with .ci/install-sglang-parsers.sh "
        f"{_parsers_root()}): {done.stderr[-2000:]}"
    )
    assert "usage: sglang serve [-h] --model-path MODEL_PATH" in done.stdout
    assert "--speculative-eagle-topk" in done.stdout


def test_detection_reads_the_release_and_its_options(
    release: Release, engine: SGLangEngine, detected: FlagSet
) -> None:
    assert detected.version == release.version
    assert engine.flagset() is detected  # detected once per interpreter and prefix
    assert engine.describe().startswith(f"SGLang {release.version} (detected from env PYTHONPATH=")
    assert len(detected.options) > 200
    assert detected.dest("--model-path") == "model_path"
    assert detected.option("--disable-custom-all-reduce") is not None
    assert detected.option("--mem-fraction-static") is not None
    assert not detected.option("--mem-fraction-static").flag  # type: ignore[union-attr]
    assert detected.option("--enable-metrics").flag  # type: ignore[union-attr]
    assert sys.executable in detected.source
    assert SGLangEngine(EngineSpec(kind="sglang", python=sys.executable)).python == sys.executable


def test_known_table_agrees_with_the_parser(release: Release, detected: FlagSet) -> None:
    table = known_options(release.version)
    for flag, known in table.items():
        real = detected.option(flag)
        assert real is not None, f"{flag} is in the {release.version} table but not its parser"
        assert (flag, known.dest) == (flag, real.dest)
        assert (flag, known.flag) == (flag, real.flag)
        assert (flag, known.deprecated) == (flag, real.deprecated)
        if known.choices is not None:
            assert real.choices is not None and set(known.choices) <= set(real.choices), flag
    for flag in ABSENT[release.version]:
        assert not detected.has(flag), f"{flag} exists in {release.version} after all"


def test_table_and_detection_build_the_same_commands(
    release: Release, parsed: dict[int, list[tuple[ServerConfig, LaunchSpec, dict[str, Any]]]]
) -> None:
    by_table = _engine(release)
    for concurrency, runs in parsed.items():
        workload = WorkloadSpec(concurrency=concurrency)
        for config, detected_launch, _ in runs:
            launch = by_table.build_launch(config, port=31234, workload=workload)
            assert _server_argv(launch.argv) == _server_argv(detected_launch.argv)
            assert dict(launch.env) == dict(detected_launch.env)


@pytest.mark.parametrize("concurrency", CONCURRENCIES)
def test_every_sampled_command_parses_and_means_what_was_recorded(
    release: Release,
    detected: FlagSet,
    parsed: dict[int, list[tuple[ServerConfig, LaunchSpec, dict[str, Any]]]],
    concurrency: int,
) -> None:
    runs = parsed[concurrency]
    assert len(runs) > 300
    deprecated = {flag for flag, info in detected.options.items() if info.deprecated}
    for config, launch, result in runs:
        assert result["code"] == 0, f"{launch.display()}\n{result['stderr']}"
        ns = result["ns"]
        expected = _expected(config, release.version, concurrency)
        got = {key: ns[key] for key in expected}
        assert got == expected, launch.display()
        algo = {"nccl_tree": "Tree", "nccl_ring": "Ring"}.get(config.allreduce)
        assert launch.env.get("NCCL_ALGO") == algo
        assert not deprecated & set(launch.argv), launch.display()


#: Command lines each release's parser must refuse (argparse exit code 2), with its message.
REFUSED = {
    "0.5.23": [
        (["--cuda-graph-max-bs", "64"], "ambiguous option: --cuda-graph-max-bs"),
        (["--enable-ep-moe"], "unrecognized arguments: --enable-ep-moe"),
    ],
    "0.5.3": [
        (["--cuda-graph-max-bs-decode", "64"], "unrecognized arguments"),
        (["--cuda-graph-backend-decode", "disabled"], "unrecognized arguments"),
        (["--flashinfer-allreduce-fusion-backend", "auto"], "unrecognized arguments"),
    ],
}


def test_each_release_refuses_the_other_releases_spelling(release: Release) -> None:
    cases = REFUSED[release.version]
    argvs = [["--model-path", "/models/kimi", *extra] for extra, _ in cases]
    for (_, message), result in zip(cases, release.parse(argvs), strict=True):
        assert result["code"] == 2
        assert message in result["stderr"]


def test_the_releases_switches_are_read_from_the_release(
    release: Release, engine: SGLangEngine, detected: FlagSet
) -> None:
    # neither 0.5.23 nor 0.5.3 declares SGLANG_ENABLE_SPEC_V2 (0.5.5 to 0.5.13 do)
    assert detected.env_vars == _engine(release).flagset().env_vars == frozenset()
    refused = engine.unsupported_values("spec_v2", [True])
    assert "reads no SGLANG_ENABLE_SPEC_V2" in refused[True]
    adaptive = engine.unsupported_values("speculative_adaptive", [True])
    assert bool(adaptive) is (release.version == "0.5.3")
    assert detected.counts_draft_in_static is (release.version == "0.5.23")


def test_attention_backends_the_release_lacks_are_refused_before_start(
    release: Release, engine: SGLangEngine
) -> None:
    lacking = {"0.5.23": "cutlass_mla", "0.5.3": "dsa"}[release.version]
    refused = engine.unsupported_values("attention_backend", ["fa3", "flashinfer", lacking])
    assert set(refused) == {lacking}
    assert "--attention-backend" in refused[lacking]
    refused = engine.unsupported_values("allreduce", ["nccl", "torch_symm_mem", "mscclpp"])
    assert refused == {}
