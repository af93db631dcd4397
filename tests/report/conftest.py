"""A small study of the seed system, run once with ``autotune study start`` for the report tests.

Its trials: 0 the baseline, 1 the hand-tuned EAGLE-3 configuration, then the failures of
``SEED_FAILURES`` (2 a KV-pool crash, 3 refused before launch, 4 a CUDA-graph capture crash), then
the tuner's own choice and the sampler's proposals.
"""

from __future__ import annotations

import pytest
from study._helpers import StudyRun, seed_space_with_failures, start_study

SEED_TRIALS = 8


@pytest.fixture(scope="session")
def seed_study(tmp_path_factory: pytest.TempPathFactory) -> StudyRun:
    root = tmp_path_factory.mktemp("seed-study")
    space = seed_space_with_failures(root)
    return start_study(space, "seed", SEED_TRIALS, root / "studies", "--seed", "5")
