"""A project's own custom ops (``torch.ops.pmverify_user``), registered here the two ways projects
do (``torch.library.custom_op``, ``Library.define``), one through a library made in another module
(``torch.ops.pmverify_user_lib.quarter``, as vLLM's ``direct_register_custom_op`` does), and a pass
that rewrites one of them wrongly:
reproducers of graphs holding them must import this module before building the graph."""

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


def triple_to_double(graph: torch.fx.Graph) -> None:
    """Wrong: rewrites ``pmverify_user.triple(x)`` as ``x + x``."""
    for node in graph.find_nodes(op="call_function", target=torch.ops.pmverify_user.triple.default):
        with graph.inserting_before(node):
            double = graph.call_function(torch.ops.aten.add.Tensor, (node.args[0], node.args[0]))
        node.replace_all_uses_with(double)
        graph.erase_node(node)


def _quarter(x: torch.Tensor) -> torch.Tensor:
    return x / 4


def _quarter_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


register_op("quarter", _quarter, _quarter_fake)
