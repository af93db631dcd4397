"""The ``with`` block of the server's resources: leaving it closes the resource.

A log follower, the GPU monitor and a server process each hold something that must be let go
however the block is left (a file, NVML, a process group); :class:`Closing` gives them the one
``with`` protocol: entering returns the object, leaving calls its :meth:`~Closing.close`.
"""

from __future__ import annotations

import abc
from types import TracebackType
from typing import TypeVar

_C = TypeVar("_C", bound="Closing")


class Closing(abc.ABC):
    """A resource whose ``with`` block ends with :meth:`close`, whatever ends it."""

    @abc.abstractmethod
    def close(self) -> None:
        """Let the resource go (safe to call again)."""

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
