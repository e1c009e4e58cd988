"""``record_inductor``: every entry Inductor registers (rewrites, graph and lowering entries), recorded
as a fresh process registers them, in a fresh process and after Inductor was initialised, leaving
Inductor's state as it was;
``plain_tensors``: fake example inputs re-created as plain tensors."""

import json
import subprocess
import sys

import pytest
import torch

from pmverify._registry.record import plain_tensors

#: Run in a fresh process: record, then initialise Inductor as a compile does, then record again.
SCRIPT = r"""
import importlib, json
import torch
import pmverify
from torch._inductor.fx_passes import freezing_patterns, joint_graph, post_grad
from pmverify._registry.inductor_passes import import_pass_modules
from pmverify._rewrites.inductor_rewrites import _LAZY_IMPORTS, _pattern_passes

for name in _LAZY_IMPORTS:  # what the initialisers import (record_inductor imports them first too)
    importlib.import_module(f"torch._inductor.fx_passes.{name}")
import_pass_modules()  # and every pass module (record_inductor imports them first)


def state():
    return sorted(
        (id(p), sum(map(len, p.patterns.values())), sum(map(len, p.seen_patterns.values()))) for p in _pattern_passes()
    )


def summary(entries):
    rewrites = [e.rewrite for e in entries if e.kind == "replacement"]
    tensors = [x for r in rewrites for x in r.example_inputs if isinstance(x, torch.Tensor)]
    traced = [r for r in rewrites if r.search_fn_pattern is None]  # traced again when registered
    return {
        "labels": [[r.module, r.name, r.trace_fn.__name__, r.duplicate] for r in rewrites],
        "entries": [[e.kind, e.module, e.name, e.pass_name, list(e.config), e.duplicate] for e in entries],
        "plain": all(type(x) is torch.Tensor for x in tensors),
        "traced_registered": [r.pattern_pass() is not None for r in traced],
        "isolated": all(e.pattern_pass().patterns for e in entries if e.entry is not None),
    }


out = {}
before = state()
fresh = pmverify.record_inductor()
out["fresh_kept"] = state() == before and joint_graph.lazy_init.cache_info().currsize == 0
joint_graph.lazy_init(); post_grad.lazy_init(); freezing_patterns.lazy_init()
initialised = state()
again = pmverify.record_inductor()
out["initialised_kept"] = state() == initialised and initialised != before
out["fresh"], out["initialised"] = summary(fresh), summary(again)  # (its pattern passes are new ones)
out["one"] = repr(pmverify.inductor_rewrite("misc_patterns", "randperm_index_pattern"))
out["entry"] = pmverify.inductor_entry("joint_graph", "pointless_view").pass_name
print(json.dumps(out))
"""


@pytest.mark.slow  # end to end: runs in the slow step
def test_record_inductor_in_a_fresh_process_and_after_inductor_initialised():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert out["fresh_kept"] and out["initialised_kept"]  # Inductor's own state untouched, either way
    assert out["initialised"] == out["fresh"]  # the same entries, rewrites, names, duplicates and order
    labels = out["fresh"]["labels"]
    assert out["fresh"]["plain"] and all(out["fresh"]["traced_registered"]) and out["fresh"]["traced_registered"]
    assert out["fresh"]["isolated"]
    assert "randperm_index_pattern -> " in out["one"]
    assert out["entry"] == "joint_graph.early_patterns"
    if torch.__version__.startswith("2.13."):  # the figures read at torch 2.13
        modules = {}
        for module, _, _, _ in labels:
            modules[module] = modules.get(module, 0) + 1
        assert modules == {
            "pad_mm": 6,
            "fuse_attention": 136,
            "misc_patterns": 2,
            "post_grad": 1,
            "freezing_patterns": 4,
        }
        assert sum(duplicate for *_, duplicate in labels) == 19
        assert sum(trace == "joint_fwd_bwd" for _, _, trace, _ in labels) == 57
        assert len({(module, name) for module, name, _, _ in labels}) == 149
        kinds = {}
        for kind, *_ in out["fresh"]["entries"]:
            kinds[kind] = kinds.get(kind, 0) + 1
        assert kinds == {"replacement": 149, "graph": 273, "lowering": 128}


def test_fake_example_inputs_are_re_created_as_plain_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty_strided((4, 3), (1, 4), dtype=torch.float16).requires_grad_()
        scalar = torch.empty((), dtype=torch.int64)
    real = torch.ones(2)
    plain, plain_scalar, same, number = plain_tensors([fake, scalar, real, 0.5])
    assert type(plain) is torch.Tensor and type(plain_scalar) is torch.Tensor
    assert (plain.shape, plain.stride(), plain.dtype, plain.requires_grad) == ((4, 3), (1, 4), torch.float16, True)
    assert plain_scalar.shape == () and plain_scalar.dtype == torch.int64 and not plain_scalar.requires_grad
    assert same is real and number == 0.5


def _scaled_exp(x, scale):
    return torch.exp(x) * scale


def test_a_rewrite_is_named_by_its_search_functions_module():
    import functools

    from pmverify._registry.record import pattern_rewrite

    rewrite = pattern_rewrite(functools.partial(_scaled_exp, scale=2.0), (torch.empty(3),))
    assert rewrite.module == __name__ and not rewrite.duplicate
