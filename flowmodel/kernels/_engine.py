"""Which kernels a solve runs on: a typed, hashable choice, converted from a name once at the edge.

``Engine.HOST`` is the compiled CPU code of ``_host`` behind a callback; ``Engine.XLA`` is the JAX
water-filling and event loop, which runs on whatever device JAX targets. ``Engine.AUTO`` picks one
from JAX's default backend when a kernel is called. An ``Engine`` is static: it keys compiled programs
(``steptime.Options`` holds one), so it is an enum member, never a traced value.
"""

from __future__ import annotations

import enum

import jax


class Engine(enum.Enum):
    """The kernels a solve runs on (``Engine.of("xla")`` or the member itself)."""

    AUTO = "auto"
    HOST = "host"
    XLA = "xla"

    @classmethod
    def of(cls, value: Engine | str | None, field: str = "engine") -> Engine:
        """The engine named by ``value`` (an ``Engine``, ``"auto"``, ``"host"``, ``"xla"``; None is auto)."""
        if value is None:
            return cls.AUTO
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(repr(e.value) for e in cls)
            raise ValueError(f"{field}: must be one of {names}, got {value!r}") from None

    def resolved(self) -> Engine:
        """HOST or XLA: ``AUTO`` is host when JAX's default backend is the CPU, else xla (on an
        accelerator the XLA kernels run on the device; a host callback would copy every solve's inputs
        off it)."""
        if self is Engine.AUTO:
            return Engine.HOST if jax.default_backend() == "cpu" else Engine.XLA
        return self

    @property
    def on_host(self) -> bool:
        """Whether the resolved engine is the compiled host code (which reads routes, not an incidence)."""
        return self.resolved() is Engine.HOST


def engine_for(engine: Engine | str | None) -> Engine:
    """The resolved engine (HOST or XLA) a call with ``engine=`` runs."""
    return Engine.of(engine).resolved()
