"""Lowering entries of a user's pass (``register_lowering_pattern``) for the compiled check of
``check_entry``: ``relu(add(x, y))`` lowered to Inductor's ``relu(add(x, y, alpha=...))`` (correct)
or, the faults, to ``relu(sub(x, y))`` or without add's ``alpha``. Built by calling :func:`lowering_pass`, so that
``pmverify.record_entries`` records the entry."""

import torch
from torch._inductor.pattern_matcher import Arg, CallFunction, PatternMatcherPass, register_lowering_pattern

aten = torch.ops.aten
PATTERN = CallFunction(aten.relu, CallFunction(aten.add, Arg(), Arg()))


def lower_add_relu(match, x, y):
    from torch._inductor.lowering import lowerings

    # the pattern does not bind add's alpha: read it from the matched node (a handler that drops it is
    # the published bug, which check_entry found in this twin's first version)
    (add,) = (node for node in match.nodes if node.target in (aten.add.Tensor, aten.add.Scalar))
    return lowerings[aten.relu.default](lowerings[aten.add.Tensor](x, y, alpha=add.kwargs.get("alpha", 1)))


def lower_add_relu_dropping_alpha(match, x, y):
    from torch._inductor.lowering import lowerings

    return lowerings[aten.relu.default](lowerings[aten.add.Tensor](x, y))


def lower_add_relu_as_sub(match, x, y):
    from torch._inductor.lowering import lowerings

    return lowerings[aten.relu.default](lowerings[aten.sub.Tensor](x, y))


def lowering_pass(faulty: bool | str = False) -> PatternMatcherPass:
    """A pass holding one lowering entry: :func:`lower_add_relu`, or a fault (``True``: it lowers to
    ``sub``; ``"alpha"``: it drops add's ``alpha``, which the pattern does not bind)."""
    handlers = {False: lower_add_relu, True: lower_add_relu_as_sub, "alpha": lower_add_relu_dropping_alpha}
    patterns = PatternMatcherPass(pass_name="lower_add_relu")
    register_lowering_pattern(PATTERN, pass_dict=patterns)(handlers[faulty])
    return patterns
