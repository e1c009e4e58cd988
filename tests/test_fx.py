"""pmverify._fx: small FX facts the oracles share."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.utils._pytree as pytree
from torch.fx.immutable_collections import immutable_dict, immutable_list

from pmverify._fx import flat_nodes

Pair = collections.namedtuple("Pair", "first second")


def _nodes() -> list[torch.fx.Node]:
    graph = torch.fx.Graph()
    return [graph.placeholder(name) for name in "abcd"]


def _values() -> list[object]:
    a, b, c, d = _nodes()
    return [
        a,
        None,
        3,
        torch.float32,
        (a, 1, [b, {"k": c, "j": (d, a)}]),
        immutable_list([a, immutable_dict({"x": b, "y": [c]})]),
        {"z": d, "a": a},  # insertion order, as pytree flattens a dict
        Pair(b, [a]),  # a container pytree knows that the fast walk leaves to it
        collections.OrderedDict([("q", c), ("p", b)]),
        slice(a, b),  # a leaf to pytree: its nodes are not arguments
        [a, a, b],
    ]


@pytest.mark.parametrize("value", _values(), ids=repr)
def test_flat_nodes_are_the_nodes_among_pytree_leaves_in_order(value: object) -> None:
    expected = [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.fx.Node)]
    assert flat_nodes(value) == expected
