"""A user's pass module for the audit's tests: it registers, when imported, tiny rewrites that the
audit must tell apart (each named by its search function):

- ``relu_relu``: a correct rewrite (``relu(relu(x))`` → ``relu(x)``): ``ok``;
- ``silu``: a wrong one (``x * sigmoid(x)`` → ``relu(x)``): a semantics ``finding``;
- ``exits``: its replacement calls ``os._exit(3)`` when it is traced, on a match: the worker dies;
- ``hangs``: its replacement sleeps for an hour on a match: the worker hangs;
- ``complex_abs``: complex example inputs, which pmverify cannot draw: an ``error`` of pmverify;
- ``never``: an ``extra_check`` that refuses every match, and no gate: a ``never_matched`` finding;
- ``relu_relu`` again, registered with ``skip_duplicates=True``: ``not registered``.

Only ``exits`` and ``hangs`` misbehave, and only on a match (never while the module is imported).
"""

import os
import time

import torch
from torch._inductor.pattern_matcher import PatternMatcherPass, fwd_only, register_replacement

PASS = PatternMatcherPass(pass_name="audit_test_pass")


def relu_relu(x):
    return torch.relu(torch.relu(x))


def relu_relu_replacement(x):
    return torch.relu(x)


def silu(x):
    return x * torch.sigmoid(x)


def silu_replacement(x):
    return torch.relu(x)


def exits(x):
    return torch.tanh(torch.tanh(x))


def exits_replacement(x):
    os._exit(3)


def hangs(x):
    return torch.exp(torch.exp(x))


def hangs_replacement(x):
    time.sleep(3600)


def complex_abs(z):
    return torch.abs(torch.neg(z))


def complex_abs_replacement(z):
    return torch.abs(z)


def never(x):
    return torch.sin(torch.sin(x))


def never_replacement(x):
    return torch.sin(x)


def refuse(match):
    return False


def _register(search, replace, example, extra_check=None):
    checks = {"extra_check": extra_check} if extra_check is not None else {}
    register_replacement(search, replace, example, fwd_only, PASS, skip_duplicates=True, **checks)


_register(relu_relu, relu_relu_replacement, [torch.empty(4, 8)])
_register(silu, silu_replacement, [torch.empty(4, 8)])
_register(exits, exits_replacement, [torch.empty(4, 8)])
_register(hangs, hangs_replacement, [torch.empty(4, 8)])
_register(complex_abs, complex_abs_replacement, [torch.empty(4, 8, dtype=torch.complex64)])
_register(never, never_replacement, [torch.empty(4, 8)], refuse)
_register(relu_relu, relu_relu_replacement, [torch.empty(4, 8)])


def build():
    """The pass, built by calling: what ``_audit_passes:build`` names (its rewrites are recorded
    while it runs; a module already imported registers nothing at import)."""
    global PASS
    PASS = PatternMatcherPass(pass_name="audit_test_pass_built")
    register_replacement(silu, silu_replacement, [torch.empty(4, 8)], fwd_only, PASS)
    return PASS
