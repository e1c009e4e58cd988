"""A small symbolic case the compiled-mode and reproducer tests share."""

import torch

from pmverify import GraphCase
from pmverify._shapes.symbolic import symbolize


def doubled_view_case(seed: int = 0) -> GraphCase:
    """view(x, [22, 2, 2]) of an (11, 8) input, summed and scaled by w [2], symbolized:
    ``view(x, [2*s0, 2, 2])``, s0 in [2, 64]."""
    aten = torch.ops.aten
    graph = torch.fx.Graph()
    x, w = graph.placeholder("x"), graph.placeholder("w")
    view = graph.call_function(aten.view.default, (x, [22, 2, 2]))
    total = graph.call_function(aten.sum.dim_IntList, (view, [2]))
    graph.output((graph.call_function(aten.mul.Tensor, (total, w)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    gen = torch.Generator().manual_seed(seed)
    return symbolize(GraphCase(gm, [(torch.randn(11, 8, generator=gen), torch.randn(2, generator=gen))]))
