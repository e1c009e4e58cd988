"""Lowering entries of a user's pass (``register_lowering_pattern``) for the compiled check of
``check_entry``: ``relu(add(x, y))`` lowered to Inductor's ``relu(add(x, y))`` (correct) or, the
fault, to ``relu(sub(x, y))``. Built by calling :func:`lowering_pass`, so that
``pmverify.record_entries`` records the entry."""

import torch
from torch._inductor.pattern_matcher import Arg, CallFunction, PatternMatcherPass, register_lowering_pattern

aten = torch.ops.aten
PATTERN = CallFunction(aten.relu, CallFunction(aten.add, Arg(), Arg()))


def lower_add_relu(match, x, y):
    from torch._inductor.lowering import lowerings

    return lowerings[aten.relu.default](lowerings[aten.add.Tensor](x, y))


def lower_add_relu_as_sub(match, x, y):
    from torch._inductor.lowering import lowerings

    return lowerings[aten.relu.default](lowerings[aten.sub.Tensor](x, y))


def lowering_pass(faulty: bool = False) -> PatternMatcherPass:
    """A pass holding one lowering entry: :func:`lower_add_relu`, or its fault."""
    patterns = PatternMatcherPass(pass_name="lower_add_relu")
    register_lowering_pattern(PATTERN, pass_dict=patterns)(lower_add_relu_as_sub if faulty else lower_add_relu)
    return patterns
