"""The shape of the randomness the core accepts. Drivers pass a seeded random.Random; the core
never imports `random` itself, so no choice can come from global state."""

from __future__ import annotations

from typing import Protocol, Sequence, TypeVar

T = TypeVar("T")


class Rng(Protocol):
    def random(self) -> float: ...
    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int: ...
    def sample(self, population: Sequence[T], k: int) -> list[T]: ...
    def choice(self, seq: Sequence[T]) -> T: ...
