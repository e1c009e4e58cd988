"""The config and base pass of the vLLM-style passes: a pass is built as ``Pass(config)`` from a
frozen dataclass of the fields passes read, and its ``uuid()`` hashes its source (every class of
its MRO up to :class:`VStylePass`) and the config fields it declares in ``uses``, as vLLM's
``VllmInductorPass.hash_source`` plus a config hash would. A field a pass does not read (``debug``,
``tp_rank`` for a single-rank fusion) stays out of its uuid, so Inductor's cache still hits."""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import inspect
from typing import ClassVar

import torch

DEFAULT_GROUP_NAME = "0"


@dataclasses.dataclass(frozen=True)
class VStyleConfig:
    """What the passes read.

    - ``epsilon``: the RMS norm epsilon the fusions match (a literal in their patterns, as vLLM
      registers one pattern per epsilon); default 1e-6.
    - ``quant_dtype``: the dtype static quantization writes (``float8_e4m3fn``, as on a GPU; any
      float dtype the ops take).
    - ``tp_rank`` / ``tp_world``: this rank and the ranks of its group (the fused collective).
    - ``group_name``: the process group the collective runs on, by name.
    - ``defunctionalize``: names of ``namespace::op`` ops the defunctionalization rewrites.
    - ``debug``: logs more; no pass rewrites otherwise for it.
    """

    epsilon: float = 1e-6
    quant_dtype: torch.dtype = torch.float8_e4m3fn
    tp_rank: int = 0
    tp_world: int = 1
    group_name: str = DEFAULT_GROUP_NAME
    defunctionalize: tuple[str, ...] = ()
    debug: bool = False


class VStylePass(abc.ABC):
    """A graph pass built from a :class:`VStyleConfig`; ``__call__(graph)`` rewrites in place and
    sets ``matched_count``. Subclasses name the config fields they read in ``uses``."""

    uses: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: VStyleConfig) -> None:
        if not isinstance(config, VStyleConfig):
            raise TypeError(f"{type(self).__name__} takes a VStyleConfig, not {config!r}")
        self.config = config
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.matched_count = self.apply(graph)

    @abc.abstractmethod
    def apply(self, graph: torch.fx.Graph) -> int:
        """Rewrite ``graph`` in place; return the number of rewrites."""

    @classmethod
    def hash_source(cls) -> str:
        sources = [inspect.getsource(klass) for klass in cls.__mro__ if issubclass(klass, VStylePass)]
        return hashlib.sha256("\n".join(sources).encode()).hexdigest()

    def uuid(self) -> str:
        fields = {name: repr(getattr(self.config, name)) for name in self.uses}
        return hashlib.sha256(f"{self.hash_source()}|{sorted(fields.items())}".encode()).hexdigest()
