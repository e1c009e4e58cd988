"""The QK-norm fusion's testing side as a user of the tool: public strategy reprs, a config that
does not depend on pmverify.distributed, and target modules that import nothing of triton, so
that a fuzz target sets up Triton's interpreter before it is imported."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import torch
from hypothesis import strategies as st

from pmverify import distributed
from pmverify.fusions.qk_norm import QKNormConfig, config
from pmverify.fusions.qk_norm.testing import qk_norm_cases, qk_norm_tp_cases


def test_strategy_reprs_show_the_public_call():
    assert repr(qk_norm_cases()) == "qk_norm_cases()"
    assert (
        repr(qk_norm_cases(max_instances=3, near_misses=False)) == "qk_norm_cases(max_instances=3, near_misses=False)"
    )
    assert repr(qk_norm_cases(dtypes=(torch.float16,))) == "qk_norm_cases(dtypes=(torch.float16,))"
    assert repr(qk_norm_cases(QKNormConfig(8, 4))).startswith("qk_norm_cases(config=QKNormConfig(")
    assert repr(qk_norm_tp_cases()) == "qk_norm_tp_cases()"
    assert repr(qk_norm_tp_cases(tp_world=st.just(2))) == "qk_norm_tp_cases(tp_world=just(2))"
    assert repr(qk_norm_cases(dynamic=True)) == "qk_norm_cases(dynamic=True)"
    assert repr(qk_norm_tp_cases(dynamic="tokens")) == "qk_norm_tp_cases(dynamic='tokens')"
    assert repr(qk_norm_cases(dynamic=False)) == "qk_norm_cases()"


def test_the_config_names_the_default_group_without_importing_distributed():
    assert config.DEFAULT_GROUP_NAME == distributed.DEFAULT_GROUP_NAME
    tree = ast.parse(open(config.__file__).read())
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)] + [
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    ]
    assert not [name for name in imported if "distributed" in name], imported


def test_target_sources_import_no_triton_before_their_set_up():
    """Resolving the built-in target sources by name imports no triton: the shipped pass's
    target, and the bank's, set up Triton's interpreter (without a GPU) before importing it."""
    script = (
        "import sys\n"
        "from pmverify.fusions.qk_norm.testing import fuzz_targets, qk_norm_cases, qk_norm_tp_cases\n"
        "import pmverify.faults, pmverify.faults.target\n"
        "assert 'triton' not in sys.modules, 'imported triton'\n"
        "fuzz_targets()['qk_norm']()\n"
        "import os, torch\n"
        "assert torch.cuda.is_available() or os.environ['TRITON_INTERPRET'] == '1'\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
