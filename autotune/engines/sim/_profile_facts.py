"""What a simulated engine knows of its GPUs and models: the simulator profile's figures."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from autotune._errors import ConfigError
from autotune.engines._base import Hardware

if TYPE_CHECKING:
    from autotune.engines._spec import EngineSpec
    from autotune.sim import Profile


class ProfileFacts:
    """The GPUs, the target's architecture and the weight sizes of ``engine.sim.profile``
    (for an adapter of the simulated server; ``spec`` is the adapter's engine section)."""

    spec: EngineSpec
    #: A simulated server's figures come from the profile, not from the files at model_path.
    runs_checkpoint: ClassVar[bool] = False

    @classmethod
    def facts_profile(cls, spec: EngineSpec) -> str | None:
        """``engine.sim.profile``: the simulated box's facts are the profile's."""
        return spec.sim.profile

    def hardware(self) -> Hardware:
        """The simulated GPUs, from the profile (unknown fields when it has none)."""
        profile = self._profile()
        if profile is None:
            return Hardware()
        hw = profile.hardware
        capability = tuple(hw.compute_capability)
        return Hardware(
            gpu_name=hw.gpu_name,
            gpu_count=hw.gpu_count,
            memory_gib=float(hw.memory_gib),
            compute_capability=(int(capability[0]), int(capability[1])),
            interconnect=hw.interconnect,
        )

    def architecture(self) -> str | None:
        """The architecture of the profile's target model."""
        try:
            profile = self._profile()
        except ConfigError:
            return None
        return None if profile is None else profile.model.architecture

    def weights_gib(self, algorithm: str | None = None) -> tuple[float | None, float | None]:
        """The profile's target weights and draft weights, both on all GPUs together.

        The profile gives the draft head per GPU (every rank holds a whole copy), so its total
        is that times ``engine.tp_size``. ``algorithm`` None: the profile's only draft, if it
        has exactly one.
        """
        profile = self._profile()
        if profile is None:
            return None, None
        target = float(profile.model.weights_gib)
        if algorithm is None:
            drafts = list(profile.drafts)
            if len(drafts) != 1:
                return target, None
            algorithm = drafts[0]
        draft = profile.draft_weights_gib(algorithm.upper())
        return target, None if draft is None else float(draft) * max(1, self.spec.tp_size)

    def _profile(self) -> Profile | None:
        try:
            from autotune.sim import load_profile
        except ImportError:
            return None
        return load_profile(self.spec.sim.profile)
