"""Inductor's pad_mm training rewrites can never match (torch 2.13): dead patterns, no wrong results.

``_pad_mm_init`` (torch/_inductor/fx_passes/pad_mm.py) registers ``mm_pattern_training``,
``bmm_pattern_training`` and ``addmm_pattern_training`` from pre-serialized patterns
(torch/_inductor/fx_passes/serialized_patterns/mm_pattern.py, bmm_pattern.py, addmm_pattern.py).
They are ``MultiOutputPattern``s: the forward ``mm(mat1, mat2)`` plus the backward
``mm(tangents_1, permute(mat2))`` and ``mm(permute(mat1), tangents_1)``. The matcher finds the
backward outputs from "anchors": pattern objects of the forward match, looked up by identity
(``PatternExpr.find_anchor_nodes``, ``if self in ctx.pattern_to_node``). In a freshly traced pattern
``mat1`` / ``mat2`` / ``tangents_1`` are one ``KeywordArg`` object each, shared by all outputs; the
serialized file writes a new ``KeywordArg('mat2')`` at every use, so the backward outputs share no
object with the forward one, the matcher reports "no anchor found", and the rewrite never fires on
any graph. ``addmm_pattern_training`` is dead even freshly traced: its second output, the bias
gradient ``view(sum(mul.Scalar(tangents_1, beta)))``, reaches the forward only through
``tangents_1`` (not yet matched) and ``beta`` (a constant, not a node), so it has no anchor either
(the graph below gives addmm explicit ``beta``/``alpha``, which the pattern's backward needs). No result is wrong: the ``*_inference``
patterns still match every single ``mm``/``bmm``/``addmm`` of the joint graph, so Inductor pads them
anyway. Explains the audit's "never matched" on ``pad_mm/mm_pattern_training``,
``bmm_pattern_training``, ``addmm_pattern_training``.

Standalone: needs only torch. Captures the joint forward/backward graph ``torch.compile`` hands to
Inductor's joint-graph passes (through ``joint_custom_pre_pass``), registers each pattern as
``gen_register_replacement`` does into a fresh ``PatternMatcherPass`` with its extra_check forced
true (the real one benchmarks on a GPU), and counts matches: the serialized training pattern, the
same pattern freshly traced, and the inference pattern. Exits 1 while a serialized training pattern
matches nothing (the bug), 0 once all three match.
"""

import copy
import sys
import warnings

import torch
import torch._inductor.config as inductor_config
from torch._inductor.fx_passes import pad_mm
from torch._inductor.fx_passes.serialized_patterns import addmm_pattern, bmm_pattern, mm_pattern
from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, joint_fwd_bwd, register_replacement


def program(a, b, c, d, bias, x, y):
    return torch.mm(a, b), torch.bmm(c, d), torch.addmm(bias, x, y, beta=0.5, alpha=2.0)


def joint_graph():
    captured = []
    inductor_config.joint_custom_pre_pass = lambda graph: captured.append(copy.deepcopy(graph.owning_module))
    shapes = [(5, 7), (7, 3), (2, 5, 7), (2, 7, 3), (3,), (5, 7), (7, 3)]
    args = [torch.randn(shape, requires_grad=True) for shape in shapes]
    outputs = torch.compile(program, backend="inductor")(*args)
    sum(o.sum() for o in outputs).backward()
    inductor_config.joint_custom_pre_pass = None
    return captured[0]


def count_matches(gm, search_fn, replace_fn, example_inputs, trace_fn, workaround, serialized):
    patterns = PatternMatcherPass()
    register_replacement(
        search_fn,
        replace_fn,
        example_inputs,
        trace_fn,
        patterns,
        extra_check=lambda match: True,
        scalar_workaround=workaround,
        search_fn_pattern=serialized,
    )
    return patterns.apply(copy.deepcopy(gm).graph)


def main() -> int:
    warnings.filterwarnings("ignore", category=FutureWarning)  # deepcopy of the graph's pytree specs
    gm = joint_graph()
    m2, m3, v1 = ((4, 4), (4, 4, 4), (4,))
    rewrites = [
        ("mm", pad_mm.mm_pattern, pad_mm.mm_replace, (m2, m2), {}, mm_pattern),
        ("bmm", pad_mm.bmm_pattern, pad_mm.bmm_replace, (m3, m3), {}, bmm_pattern),
        (
            "addmm",
            pad_mm.addmm_pattern,
            pad_mm.addmm_replace,
            (v1, m2, m2),
            {"beta": 0.213377, "alpha": 0.113377},
            addmm_pattern,
        ),
    ]
    dead = []
    print(f"torch {torch.__version__}: matches in the joint graph of mm, bmm, addmm(beta=0.5, alpha=2.0)")
    for name, search_fn, replace_fn, shapes, workaround, module in rewrites:
        inputs = [torch.empty(shape, requires_grad=True) for shape in shapes]
        serialized = count_matches(
            gm, search_fn, replace_fn, inputs, joint_fwd_bwd, workaround, getattr(module, f"{name}_pattern_training")
        )
        traced = count_matches(gm, search_fn, replace_fn, inputs, joint_fwd_bwd, workaround, None)
        inference = count_matches(
            gm, search_fn, replace_fn, inputs, fwd_only, workaround, getattr(module, f"{name}_pattern_inference")
        )
        print(
            f"  {name}_pattern_training: serialized (what Inductor registers) {serialized}, freshly traced {traced}; {name}_pattern_inference {inference}"
        )
        if serialized == 0:
            dead.append(f"{name}_pattern_training")
    print("never matching:", ", ".join(dead) if dead else "none")
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main())
