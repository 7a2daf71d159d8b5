"""Make a Ray actor handle look like the plain object it wraps.

Every actor is a plain class under a thin Ray wrapper. Code that drives actors (the rollout
pipeline, the training loop) is written against the plain classes' async methods; ``AsyncProxy``
lets the same code drive a Ray actor handle, so tests pass plain objects and production passes
``AsyncProxy(handle)``. ``remote_class`` builds the thin wrapper itself, importing Ray lazily.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any


class AsyncProxy:
    """``await proxy.method(*args)`` runs ``await handle.method.remote(*args)``."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def __getattr__(self, name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
        method = getattr(self.handle, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await method.remote(*args, **kwargs)

        call.__name__ = name
        return call


def remote_class(cls: type, **ray_options: Any) -> Any:
    """``ray.remote(**ray_options)(cls)``: the Ray actor class for a plain class, imported lazily.

    Actors default to ``num_cpus=0`` so that a small machine never deadlocks on CPU reservations;
    their real limits are the pipeline's per-stage concurrency settings.
    """
    import ray

    options = {"num_cpus": 0, **ray_options}
    return ray.remote(**options)(cls)
