"""What the faults share: config checks, a uuid that hashes source and configuration, node tests."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import sys
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass

from ..fusions.qk_norm import QKNormConfig, QKNormFusionPass

__all__ = ["aten", "convert", "is_call", "validate_config", "fault_uuid", "HandWrittenFault", "DtypesConfig"]

aten = torch.ops.aten
convert = torch.ops.prims.convert_element_type.default


@dataclasses.dataclass(frozen=True)
class DtypesConfig:
    """What a hand-written fault outside the QK-norm domain rewrites: nodes whose result has one of
    ``dtypes`` (default every floating dtype)."""

    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def is_call(node: Any, target: Any) -> bool:
    """Whether ``node`` is an FX ``call_function`` node of ``target``."""
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is target


def validate_config(config: Any, kind: type = QKNormConfig) -> None:
    """Raise ``TypeError`` unless ``config`` is a ``kind`` or None."""
    if config is not None and not isinstance(config, kind):
        raise TypeError(f"config={config!r} must be a {kind.__name__} or None")


def fault_uuid(pass_: Any) -> str:
    """Hash of this module's source, the fault's module's source, the shipped fusion's uuid (for a
    :class:`QKNormConfig`), the class name and every config field: what the shipped pass hashes."""
    digest = hashlib.sha256(inspect.getsource(sys.modules[__name__]).encode())
    digest.update(inspect.getsource(sys.modules[type(pass_).__module__]).encode())
    config = pass_.config
    if isinstance(config, QKNormConfig):
        digest.update(QKNormFusionPass(config).uuid().encode())
    digest.update(type(pass_).__qualname__.encode())
    if config is not None:
        for field in dataclasses.fields(config):
            digest.update(f"{field.name}={getattr(config, field.name)!r};".encode())
    return digest.hexdigest()


class HandWrittenFault(CustomGraphPass):
    """Base of the faults written by hand as Inductor ``CustomGraphPass``es: a ``config``, a
    ``uuid()`` that hashes source and configuration (:func:`fault_uuid`), a repr that rebuilds it."""

    config: Any

    def uuid(self) -> str:
        return fault_uuid(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"
