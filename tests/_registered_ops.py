"""A project's own custom ops (``torch.ops.pmverify_user``), registered here the two ways projects
do (``torch.library.custom_op``, ``Library.define``), one through a library made in another module
(``torch.ops.pmverify_user_lib.quarter``, as vLLM's ``direct_register_custom_op`` does). Reproducers
of graphs holding them must import this module before building the graph."""

import torch
from _user_op_library import register_op

_lib = torch.library.Library("pmverify_user", "DEF")
_lib.define("triple(Tensor x) -> Tensor")


@torch.library.impl(_lib, "triple", "CompositeExplicitAutograd")
def _triple(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@torch.library.custom_op("pmverify_user::halve", mutates_args=())
def halve(x: torch.Tensor) -> torch.Tensor:
    return x / 2


@halve.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _quarter(x: torch.Tensor) -> torch.Tensor:
    return x / 4


def _quarter_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


register_op("quarter", _quarter, _quarter_fake)
