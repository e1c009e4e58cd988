"""A user's pass module for the audit's tests with hand-written handlers: when imported it registers
one rewrite (``relu_relu``), two graph entries of one handler (``drop_neg`` on ``neg(neg(x))`` and
on ``Tensor.neg(Tensor.neg(x))``, which removes the pair) and a lowering entry (``lower_abs``)."""

import torch
from torch._inductor.pattern_matcher import (
    Arg,
    CallFunction,
    CallMethod,
    PatternMatcherPass,
    fwd_only,
    register_graph_pattern,
    register_lowering_pattern,
    register_replacement,
)

aten = torch.ops.aten
PASSES = [PatternMatcherPass(pass_name="graph_test_pass"), PatternMatcherPass()]


def relu_relu(x):
    return torch.relu(torch.relu(x))


def relu_relu_replacement(x):
    return torch.relu(x)


register_replacement(relu_relu, relu_relu_replacement, [torch.empty(4, 8)], fwd_only, PASSES[0])


def drop_neg(match, x):
    match.output_node().replace_all_uses_with(x)
    match.erase_nodes()


for pattern in (CallFunction(aten.neg, CallFunction(aten.neg, Arg())), CallMethod("neg", CallMethod("neg", Arg()))):
    register_graph_pattern(pattern, pass_dict=PASSES[0])(drop_neg)


@register_lowering_pattern(CallFunction(aten.abs, CallFunction(aten.abs, Arg())), pass_dict=PASSES[1])
def lower_abs(match, x):
    raise NotImplementedError("lowered only under torch.compile")
