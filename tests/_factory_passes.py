"""Passes in vLLM's style for the pass-factory tests: built as ``Pass(config)`` from a config that is
not a case's ``pass_config`` (no evaluable repr), a ``uuid()`` hashing the source and the config; and
the factories that build them (module-level, as ``verify(pass_factory=...)`` wants)."""

import hashlib
import inspect

import torch


class ModelConfig:
    """A config object as vLLM's: nested, its repr not Python (a reproducer cannot rebuild it)."""

    def __init__(self, scale: float = 2.0) -> None:
        self.scale = scale


class VllmLikeConfig:
    def __init__(self, model: ModelConfig | None = None) -> None:
        self.model = model or ModelConfig()


class MulFoldPass:
    """Rewrites ``mul(x, c)`` into ``mul(x, model.scale)``: right only where ``c`` is that scale
    (the bug the tests find: it never looks at ``c``)."""

    def __init__(self, config: VllmLikeConfig) -> None:
        self.scale = config.model.scale
        self.matched_count = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        for node in graph.find_nodes(op="call_function", target=torch.ops.aten.mul.Tensor):
            if isinstance(node.args[1], float):
                node.args = (node.args[0], self.scale)
                self.matched_count += 1

    def uuid(self) -> str:
        return hashlib.sha256((inspect.getsource(type(self)) + repr(self.scale)).encode()).hexdigest()


def make_mul_fold_pass() -> MulFoldPass:
    """A zero-argument factory: the pass built from vLLM-style config pmverify knows nothing of."""
    return MulFoldPass(VllmLikeConfig(ModelConfig(scale=2.0)))


def mul_fold_pass_for(config: dict) -> MulFoldPass:
    """A factory taking a case's ``pass_config`` (``{"scale": ...}``) into the pass's own config."""
    return MulFoldPass(VllmLikeConfig(ModelConfig(scale=config["scale"])))


class SourceOnlyUuidPass(MulFoldPass):
    """vLLM's uuid: the source only, the scale it bakes in left out (a cache-key finding)."""

    def uuid(self) -> str:
        return hashlib.sha256(inspect.getsource(MulFoldPass).encode()).hexdigest()


def source_only_uuid_pass_for(config: dict) -> SourceOnlyUuidPass:
    return SourceOnlyUuidPass(VllmLikeConfig(ModelConfig(scale=config["scale"])))


def triple_to_double(graph: torch.fx.Graph) -> None:
    """A pass on the ops of ``_registered_ops`` (which this module does not import). Wrong: rewrites ``pmverify_user.triple(x)`` as ``x + x``."""
    for node in graph.find_nodes(op="call_function", target=torch.ops.pmverify_user.triple.default):
        with graph.inserting_before(node):
            double = graph.call_function(torch.ops.aten.add.Tensor, (node.args[0], node.args[0]))
        node.replace_all_uses_with(double)
        graph.erase_node(node)


def mul_case(scale: float = 3.0, pass_config=None):
    """``mul(x, scale)`` on 4 floats: the case the tests find the bug on (any scale but 2.0)."""
    from pmverify import GraphCase

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output((graph.call_function(torch.ops.aten.mul.Tensor, (x, scale)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    return GraphCase(gm, [(torch.linspace(-2.0, 2.0, 4),)], pass_config=pass_config)


def mul_cases():
    """The strategy of ``pmverify fuzz --target _factory_passes:make_mul_fold_pass --cases ...``."""
    from hypothesis import strategies as st

    return st.sampled_from([2.0, 3.0]).map(mul_case)
