"""The audit's names of rewrites: a name several rewrites of a module share says their dtypes and
trace function (``gelu_mul[bfloat16, fwd_only]``), numbered only where those are shared too; names
are unique, do not depend on the other names registered, and ``--rewrite`` takes them as they are."""

import functools

import pytest
import torch
from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, joint_fwd_bwd, register_replacement

import pmverify
from pmverify._audit import list_rewrites
from pmverify._audit.sources import listing
from pmverify._rewrites.inductor_rewrites import unique_labels


def gelu_mul(x, y):
    return torch.nn.functional.gelu(x, approximate="tanh") * y


def relu_add(x, y):
    return torch.relu(x) + y


def _record(*registrations):
    """Record (register=False) one ``register_replacement`` of each ``(search, dtypes, trace)``."""
    with pmverify.record_patterns(register=False) as rewrites:
        for search, dtypes, trace in registrations:
            example = [torch.empty(4, 8, dtype=dtype) for dtype in dtypes]
            register_replacement(search, search, example, trace, PatternMatcherPass())
    return rewrites


def test_a_shared_name_says_its_dtypes_and_trace_and_a_number_only_where_those_are_shared_too():
    rewrites = _record(
        (gelu_mul, (torch.bfloat16, torch.bfloat16), fwd_only),
        (gelu_mul, (torch.float32, torch.float32), fwd_only),
        (relu_add, (torch.float32, torch.float32), fwd_only),
        (gelu_mul, (torch.float32, torch.float32), joint_fwd_bwd),
        (gelu_mul, (torch.float16, torch.float32), functools.partial(fwd_only, run_functional_passes=False)),
        (gelu_mul, (torch.float32, torch.float32), fwd_only),
    )
    module = __name__
    assert unique_labels(rewrites) == [
        (module, "gelu_mul[bfloat16, fwd_only]"),
        (module, "gelu_mul[float32, fwd_only]#1"),
        (module, "relu_add"),  # the only rewrite of its name keeps it as it is
        (module, "gelu_mul[float32, joint_fwd_bwd]"),
        (module, "gelu_mul[float16/float32, fwd_only]"),  # mixed dtypes, in order; a partial's function
        (module, "gelu_mul[float32, fwd_only]#2"),
    ]
    # a label depends only on the rewrites of its own name: more of another name change nothing
    more = _record((relu_add, (torch.bfloat16, torch.bfloat16), fwd_only))
    assert unique_labels([*rewrites, *more])[:2] == unique_labels(rewrites)[:2]
    assert unique_labels([*rewrites, *more])[2] == (module, "relu_add[float32, fwd_only]")
    assert len(set(unique_labels([*rewrites, *more]))) == len(rewrites) + 1


def test_the_audit_lists_and_filters_rewrites_by_these_names(monkeypatch):
    rewrites = _record(
        (gelu_mul, (torch.bfloat16, torch.bfloat16), fwd_only), (gelu_mul, (torch.float32, torch.float32), fwd_only)
    )
    listed = listing("mine", rewrites)
    assert [(r.name, r.trace_fn) for r in listed] == [
        ("gelu_mul[bfloat16, fwd_only]", "fwd_only"),
        ("gelu_mul[float32, fwd_only]", "fwd_only"),
    ]
    monkeypatch.setattr("pmverify._audit.record_source", lambda spec, kinds=None: rewrites)
    # brackets are a set to fnmatch: a name given as it is printed is taken as it is
    assert [r.name for r in list_rewrites(["mine"], ["gelu_mul[float32, fwd_only]"])] == ["gelu_mul[float32, fwd_only]"]
    assert [r.name for r in list_rewrites(["mine"], [f"{__name__}/gelu_mul[bfloat16, fwd_only]"])] == [
        "gelu_mul[bfloat16, fwd_only]"
    ]
    assert len(list_rewrites(["mine"], ["gelu_mul*"])) == 2
    with pytest.raises(pmverify._audit.SourceError, match="matches none of the 2 entries"):
        list_rewrites(["mine"], ["gelu_mul[float16, fwd_only]"])
