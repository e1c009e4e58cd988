"""Hand-made graphs that draw random numbers, shared by the rng and reproducer tests."""

import operator

import torch

aten = torch.ops.aten


def drawing_graph() -> torch.fx.GraphModule:
    """A hand-made graph, without fake values (as a reproducer rebuilds one), that draws with
    ``rand`` (no dtype: the default), ``bernoulli`` and ``native_dropout``: ``x * rand + bernoulli(x)
    + dropout(x)``."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    uniform = graph.call_function(aten.rand.default, ([4, 8],))
    coins = graph.call_function(aten.bernoulli.p, (x, 0.5))
    dropped = graph.call_function(
        operator.getitem, (graph.call_function(aten.native_dropout.default, (x, 0.25, True)), 0)
    )
    scaled = graph.call_function(aten.mul.Tensor, (x, uniform))
    total = graph.call_function(aten.add.Tensor, (graph.call_function(aten.add.Tensor, (scaled, coins)), dropped))
    graph.output((total,))
    return torch.fx.GraphModule(torch.nn.Module(), graph)
