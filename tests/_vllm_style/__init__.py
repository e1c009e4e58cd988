"""Passes written here the way vLLM writes its compile passes, and the custom ops they rewrite:
the test subjects of tests/test_vllm_style_passes.py (issue 29).

- :mod:`.ops`: out-variant mutable custom ops in the ``pmvllm`` namespace (``Tensor(a!) result``,
  returning nothing, as vLLM's ``_C`` ops), a functional ``all_reduce(x, group_name)`` and a fused
  all-reduce + RMS norm taking ``tp_rank`` / ``tp_world``.
- :mod:`.config`: the config dataclass and the base pass (``Pass(config)``, ``uuid()`` hashing the
  source and the config fields the pass reads).
- :mod:`.fusions`: pattern-matcher fusions through ``auto_functionalized`` with ``empty`` result
  buffers (static fp8 quant, its fused-add form, the fused collective).
- :mod:`.graph_passes`: hand-written graph passes (defunctionalization, no-op elimination).

Each correct pass has injected-bug subclasses next to it.
"""
