"""pmverify.oracles._layout.remembered: layouts computed once per node within the block, never after it."""

from __future__ import annotations

import torch

from pmverify.oracles import _layout


def _graph() -> tuple[torch.fx.Node, torch.fx.Node]:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(4, 6, device="meta")
    view = graph.call_function(torch.ops.aten.slice.Tensor, (x, 1, 2, 5))
    graph.output(view)
    return x, view


def test_a_remembered_layout_is_the_layout_and_is_forgotten_after_the_block() -> None:
    x, view = _graph()
    plain = _layout.layout(view)
    assert plain == ("x", 2, (4, 3), (6, 1), 4)
    with _layout.remembered():
        assert _layout.layout(view) == plain
        with _layout.remembered():  # nested: the outer block's memo
            assert _layout.layout(view) == plain
        assert _layout.layout(view) == plain
    view.args = (x, 1, 0, 2)  # the graph changes after the block: a fresh answer
    assert _layout.layout(view) == ("x", 0, (4, 2), (6, 1), 4)
