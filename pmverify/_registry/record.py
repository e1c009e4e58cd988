"""``record_patterns``: capture the ``register_replacement`` calls made while a pass is built.

A pass built on Inductor's pattern matcher registers its rewrites with
``torch._inductor.pattern_matcher.register_replacement(search_fn, replace_fn, example_inputs,
trace_fn, pass_dicts, extra_check, ...)``. :func:`record_patterns` records every such call as a
:class:`RecordedRewrite`, so that an unmodified third-party pass can be checked rewrite by rewrite
(:func:`pmverify.check_rewrite`) and its patterns planted into random graphs
(:func:`pmverify.strategies.planted` takes a recorded rewrite).

A recorded rewrite can be registered again, alone, into a fresh ``PatternMatcherPass``
(:meth:`RecordedRewrite.pattern_pass`): Inductor's own matcher restricted to that one rewrite, the
ground truth of which inputs it matches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = [
    "RecordedRewrite",
    "IsolatedPass",
    "isolated_pass",
    "record_patterns",
    "original_register_replacement",
    "pattern_rewrite",
    "plain_tensors",
]

#: The package of Inductor's own pattern passes; :attr:`RecordedRewrite.module` names them without it.
_INDUCTOR_PASSES = "torch._inductor.fx_passes."


def _qualname(fn: Any) -> str:
    """The qualified name of a function, without its module (``rewrites.<locals>.qk_norm_pattern``)."""
    if isinstance(fn, str):
        return fn
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None and hasattr(fn, "func"):  # functools.partial
        return f"partial({_qualname(fn.func)})"
    return name or type(fn).__name__


@dataclasses.dataclass(frozen=True, eq=False)
class RecordedRewrite:
    """One ``register_replacement`` call, as :func:`record_patterns` captured it.

    - ``search_fn`` / ``replace_fn``: the pattern and its replacement, as given.
    - ``example_inputs``: the example inputs, as a tuple: plain tensors kept as given, a fake
      tensor (Inductor's lazy initialisers record theirs in a ``FakeTensorMode`` that is gone
      afterwards) or other tensor subclass re-created as a plain tensor of the same shape, stride
      and dtype (:func:`plain_tensors`), so that :meth:`register` never fails on it.
    - ``trace_fn``: ``fwd_only`` or ``joint_fwd_bwd`` (or the tracer given).
    - ``pass_dicts``: the ``PatternMatcherPass`` (or list of them) the rewrite was registered into.
    - ``extra_check``: the match check (Inductor's always-true default when none was given).
    - ``scalar_workaround``, ``exclusive_arg_names``, ``search_fn_pattern``, ``skip_duplicates``,
      ``pattern_name``: as given, or their defaults.
    - ``arguments``: every argument of the call by parameter name, defaults filled in (what
      :meth:`register` replays).
    - ``result``: what ``register_replacement`` returned (the pattern, or False when it skipped a
      duplicate or a training pattern in inference mode); None when the call was recorded without
      registering (``record_patterns(register=False)``).

    :attr:`module` names the module the rewrite comes from and :attr:`duplicate` whether
    ``register_replacement`` skipped it. Compared and hashed by identity. The repr names the functions by qualified name and the
    example inputs by shape and dtype, never by value.
    """

    search_fn: Callable[..., Any]
    replace_fn: Callable[..., Any]
    example_inputs: tuple[Any, ...]
    trace_fn: Callable[..., Any]
    pass_dicts: Any
    extra_check: Callable[[Any], bool]
    scalar_workaround: Mapping[str, float | int] | None = None
    exclusive_arg_names: tuple[str, ...] = ()
    search_fn_pattern: Any = None
    skip_duplicates: bool = False
    pattern_name: str | None = None
    arguments: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    result: Any = dataclasses.field(default=None, repr=False)
    _isolated: Any = dataclasses.field(default=None, init=False, repr=False)
    #: whether the call was made under inference mode (where a ``joint_fwd_bwd`` rewrite is skipped)
    _inference_mode: bool = dataclasses.field(default=False, repr=False)

    @property
    def module(self) -> str:
        """The module the rewrite comes from: the search function's ``__module__`` (a
        ``functools.partial``'s function's; a callable object's class's), with Inductor's own pass
        modules named as Inductor names them (``torch._inductor.fx_passes.fuse_attention`` →
        ``"fuse_attention"``)."""
        fn = self.search_fn
        while isinstance(fn, functools.partial):
            fn = fn.func
        name = getattr(fn, "__module__", None) or type(fn).__module__
        return name.removeprefix(_INDUCTOR_PASSES)

    @property
    def duplicate(self) -> bool:
        """Whether ``register_replacement`` skipped the rewrite as a duplicate (it returned False
        outside inference mode: ``skip_duplicates=True`` and the same search pattern was registered
        before into the same pass), so that it was registered nowhere."""
        from .._compat import joint_fwd_bwd

        return self.result is False and not (self._inference_mode and self.trace_fn is joint_fwd_bwd)

    @property
    def name(self) -> str:
        """``pattern_name`` when given, else the search function's ``__name__``."""
        return self.pattern_name or getattr(self.search_fn, "__name__", _qualname(self.search_fn))

    @property
    def search_args(self) -> tuple[Any, ...]:
        """Return the arguments ``register_replacement`` traces ``search_fn`` with: ``example_inputs``
        in order, with each ``scalar_workaround`` value put at its parameter's position (extra
        example inputs, such as workaround values appended at the end, are dropped).

        Raises ``ValueError`` when there are fewer example inputs than parameters left to fill."""
        workaround = self.scalar_workaround or {}
        names = list(inspect.signature(self.search_fn).parameters)
        tensors = [name for name in names if name not in workaround]
        if len(self.example_inputs) < len(tensors):
            raise ValueError(
                f"{self!r}: {len(self.example_inputs)} example inputs for the {len(tensors)} parameters "
                f"{tensors} of the search function"
            )
        example = iter(self.example_inputs)
        return tuple(workaround[name] if name in workaround else next(example) for name in names)

    @property
    def has_extra_check(self) -> bool:
        """Whether an ``extra_check`` other than Inductor's always-true default was given."""
        from .._compat import pattern_matcher as pm

        return self.extra_check is not getattr(pm, "_return_true", None)

    def register(self, pass_dicts: Any, *, extra_check: Callable[[Any], bool] | None = None) -> Any:
        """Register this rewrite again into ``pass_dicts`` (a ``PatternMatcherPass`` or a list of
        them), through the original ``register_replacement`` (never recorded), with every other
        argument as recorded and ``extra_check`` replaced when given; return what it returns.
        Duplicates are skipped (``skip_duplicates=True``) rather than raised."""
        arguments = dict(self.arguments)
        arguments["pass_dicts"] = pass_dicts
        arguments["skip_duplicates"] = True
        if extra_check is not None:
            arguments["extra_check"] = extra_check
        try:
            return original_register_replacement()(**arguments)
        except Exception as exc:
            # A pattern holding a collective (a project's all-reduce) does not trace on real tensors
            # outside a process group; it was registered as vLLM registers, in a FakeTensorMode.
            return _register_fake(arguments, exc)

    def pattern_pass(self) -> Any:
        """Return a ``PatternMatcherPass`` holding this rewrite alone: Inductor's matcher restricted
        to it, registered on first use and cached on this record (do not register into it).

        Raises ``ValueError`` when the registration registers nothing (``register_replacement``
        returns False: e.g. a ``joint_fwd_bwd`` pattern under inference mode)."""
        return isolated_pass(self).pass_

    def __repr__(self) -> str:
        from .._validation import short_repr

        parts = [
            f"{_qualname(self.search_fn)} -> {_qualname(self.replace_fn)}",
            f"example_inputs={short_repr(self.example_inputs)}",
            f"trace_fn={_qualname(self.trace_fn)}",
        ]
        if self.has_extra_check:
            parts.append(f"extra_check={_qualname(self.extra_check)}")
        if self.scalar_workaround:
            parts.append(f"scalar_workaround={dict(self.scalar_workaround)!r}")
        if self.exclusive_arg_names:
            parts.append(f"exclusive_arg_names={self.exclusive_arg_names!r}")
        if self.search_fn_pattern is not None:
            parts.append("search_fn_pattern=<given>")
        if self.pattern_name is not None:
            parts.append(f"pattern_name={self.pattern_name!r}")
        return f"RecordedRewrite({', '.join(parts)})"


@dataclasses.dataclass
class IsolatedPass:
    """A one-rewrite ``PatternMatcherPass`` and the outcomes of its ``extra_check`` since the
    caller last cleared them; ``outcomes`` memoises ground truth by the caller's key;
    ``rejected``: the first matches the ``extra_check`` rejected, one per
    :func:`~pmverify._registry.gates.rejection_key` (where :func:`pmverify.check_rewrite` looks for a gate)."""

    pass_: Any
    checks: list[bool] = dataclasses.field(default_factory=list)
    outcomes: dict[Any, Any] = dataclasses.field(default_factory=dict)
    rejected: dict[Any, Any] = dataclasses.field(default_factory=dict)

    def reject(self, match: Any) -> None:
        """Keep ``match`` (one the ``extra_check`` rejected) if its key is new, up to
        :data:`_MAX_REJECTED` of them."""
        from .gates import rejection_key

        if len(self.rejected) < _MAX_REJECTED:
            self.rejected.setdefault(rejection_key(match), match)


_MAX_REJECTED = 8


def isolated_pass(rewrite: RecordedRewrite) -> IsolatedPass:
    """The one-rewrite pass of ``rewrite`` (registered on first use, cached on the record), with the
    outcomes of its ``extra_check`` calls; what :meth:`RecordedRewrite.pattern_pass` returns the
    pass of. Raises ``ValueError`` as it does."""
    if rewrite._isolated is None:
        from .._compat import PatternMatcherPass

        isolated = IsolatedPass(PatternMatcherPass(pass_name=f"pmverify_rewrite_{rewrite.name}"))
        user_check = rewrite.extra_check

        def extra_check(match: Any) -> bool:
            outcome = bool(user_check(match))
            isolated.checks.append(outcome)
            if not outcome:
                isolated.reject(match)
            return outcome

        if rewrite.register(isolated.pass_, extra_check=extra_check) is False:
            raise ValueError(f"registering {rewrite!r} again registered nothing (register_replacement returned False)")
        object.__setattr__(rewrite, "_isolated", isolated)
    return rewrite._isolated


@dataclasses.dataclass
class _State:
    """What the active :func:`record_patterns` blocks share: the function they replaced and the
    recorders, innermost last (each a list to fill and whether calls go through)."""

    original: Any = None
    recorders: list[tuple[list[RecordedRewrite], bool]] = dataclasses.field(default_factory=list)


_STATE = _State()


def original_register_replacement() -> Callable[..., Any]:
    """Return Inductor's ``register_replacement`` as it was before any :func:`record_patterns`
    block replaced it (calls to it are never recorded)."""
    from .._compat import pattern_matcher as pm

    return _STATE.original if _STATE.recorders else pm.register_replacement


def plain_tensors(values: Any) -> Any:
    """``values`` (a tuple or list, nested containers included) with each tensor that is not a plain
    ``torch.Tensor`` (a fake tensor of a ``FakeTensorMode``, dead once the block that made it ended,
    as Inductor's lazy initialisers record their example inputs; a functional or other subclass
    tensor made while tracing) re-created as a plain tensor of the same shape, stride, dtype,
    device and ``requires_grad``, holding zeros (a fake tensor has no values), or its constant when
    a fake tensor keeps one. Made outside every active mode, so that it stays plain when made while
    tracing. Other values are kept as given."""
    import torch

    from .._compat import outside_dispatch_modes, pytree

    def plain(value: Any) -> Any:
        if not isinstance(value, torch.Tensor) or type(value) in (torch.Tensor, torch.nn.Parameter):
            return value
        constant = getattr(value, "constant", None)  # a FakeTensor's, when it keeps one
        with outside_dispatch_modes(), torch.no_grad():
            if isinstance(constant, torch.Tensor) and type(constant) is torch.Tensor:
                fresh = constant.detach().clone()
            else:
                fresh = torch.empty_strided(
                    tuple(value.shape), tuple(value.stride()), dtype=value.dtype, device=value.device
                ).zero_()
        return fresh.requires_grad_() if value.requires_grad else fresh

    return pytree.tree_map(plain, values)


def _register_fake(arguments: dict[str, Any], error: Exception) -> Any:
    """``register_replacement(**arguments)`` again with fake copies of the example tensors, in a
    FakeTensorMode; ``error`` (the real registration's) when there is no tensor or that fails too."""
    import torch

    from .._compat import FakeTensorMode

    example = arguments.get("example_inputs")
    if not isinstance(example, (list, tuple)) or not any(isinstance(v, torch.Tensor) for v in example):
        raise error
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(v) if isinstance(v, torch.Tensor) else v for v in example]
        try:
            return original_register_replacement()(**{**arguments, "example_inputs": fake})
        except Exception:
            raise error from None


def _record(bound: inspect.BoundArguments, result: Any) -> RecordedRewrite:
    import torch

    arguments = dict(bound.arguments)
    example = arguments.get("example_inputs")
    if isinstance(example, (list, tuple)):
        example = plain_tensors(example)
        arguments["example_inputs"] = example
    return RecordedRewrite(
        search_fn=arguments["search_fn"],
        replace_fn=arguments["replace_fn"],
        example_inputs=tuple(example) if isinstance(example, (list, tuple)) else example,
        trace_fn=arguments["trace_fn"],
        pass_dicts=arguments["pass_dicts"],
        extra_check=arguments.get("extra_check"),
        scalar_workaround=arguments.get("scalar_workaround"),
        exclusive_arg_names=tuple(arguments.get("exclusive_arg_names") or ()),
        search_fn_pattern=arguments.get("search_fn_pattern"),
        skip_duplicates=bool(arguments.get("skip_duplicates", False)),
        pattern_name=arguments.get("pattern_name"),
        arguments=arguments,
        result=result,
        _inference_mode=torch.is_inference_mode_enabled(),
    )


def pattern_rewrite(
    search_fn: Callable[..., Any],
    example_inputs: tuple[Any, ...],
    *,
    trace_fn: Callable[..., Any] | None = None,
    scalar_workaround: Mapping[str, float | int] | None = None,
    exclusive_arg_names: tuple[str, ...] = (),
) -> RecordedRewrite:
    """The rewrite of ``search_fn`` into itself that ``register_replacement(search_fn, search_fn,
    example_inputs, trace_fn, ..., scalar_workaround=..., exclusive_arg_names=...)`` registers,
    recorded without registering: for :meth:`RecordedRewrite.pattern_pass`, Inductor's own matcher
    for a pattern given as a plain function (which constants it treats as wildcards, which
    arguments must be distinct nodes). ``example_inputs`` as ``register_replacement`` takes them:
    the search function's arguments less the ``scalar_workaround`` ones."""
    from .._compat import fwd_only

    bound = inspect.signature(original_register_replacement()).bind(
        search_fn,
        search_fn,
        list(example_inputs),
        trace_fn if trace_fn is not None else fwd_only,
        [],
        scalar_workaround=dict(scalar_workaround) if scalar_workaround else None,
        exclusive_arg_names=tuple(exclusive_arg_names),
    )
    bound.apply_defaults()
    return _record(bound, None)


def _recording_register_replacement(*args: Any, **kwargs: Any) -> Any:
    """Stands in for ``register_replacement`` inside :func:`record_patterns`: records the call in
    every active block, and registers it unless the innermost block says not to."""
    original = _STATE.original
    if not _STATE.recorders:  # a stale reference, kept outside a module: behave as the original
        from .._compat import pattern_matcher as pm

        return (original or pm.register_replacement)(*args, **kwargs)
    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
    except TypeError:
        return original(*args, **kwargs)  # raises the original's own error for a bad call
    bound.apply_defaults()
    register = _STATE.recorders[-1][1]
    result = original(*args, **kwargs) if register else None
    record = _record(bound, result)
    for records, _ in _STATE.recorders:
        records.append(record)
    return result


def _rebind(old: Any, new: Any) -> None:
    """Set ``register_replacement`` to ``new`` in every loaded module where it is ``old``."""
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if isinstance(namespace, dict) and namespace.get("register_replacement") is old:
            namespace["register_replacement"] = new


@contextlib.contextmanager
def record_patterns(*, register: bool = True) -> Iterator[list[RecordedRewrite]]:
    """Record every ``register_replacement`` call made while the block runs; yield the list of
    :class:`RecordedRewrite` it fills, in call order.

    - ``register``: whether the calls still register their rewrites (default True, so the pass
      being built works); with False they are recorded only, and return None. A call that raises
      is not recorded (the error propagates).

    Inside the block, ``register_replacement`` is replaced in ``torch._inductor.pattern_matcher``
    and in every loaded module holding it as a module attribute (``from
    torch._inductor.pattern_matcher import register_replacement`` at import time); all are restored
    on exit, also on an exception, and so is any module that imported it inside the block. Blocks
    nest: an inner block's calls are recorded by the outer ones too, and the innermost block's
    ``register`` decides. Not thread-safe (the replacement is process-wide). A reference held
    elsewhere (a local name imported before the block, a class attribute, a default argument, a
    ``functools.partial``) is not replaced.

    Build (or trigger) the pass inside the block: a pass that registers lazily, on first use,
    registers nothing at construction. pmverify's own ``QKNormFusionPass`` registers on first use
    of ``.patterns``, cached per (class, config) by ``functools.lru_cache``: a config registered
    before the block is not registered again (use a new config, or
    ``pmverify.fusions.qk_norm.fusion_pass._pattern_pass.cache_clear()``).

    Example::

        with pmverify.record_patterns() as rewrites:
            my_pass = MyFusionPass(config)
            my_pass.patterns  # registers lazily
        for rewrite in rewrites:
            pmverify.check_rewrite(rewrite)
    """
    if not isinstance(register, bool):
        raise TypeError(f"register={register!r} must be a bool")
    from .._compat import pattern_matcher as pm

    records: list[RecordedRewrite] = []
    if not _STATE.recorders:
        current = pm.register_replacement
        _STATE.original = current if current is not _recording_register_replacement else _STATE.original
    _STATE.recorders.append((records, register))
    try:
        _rebind(_STATE.original, _recording_register_replacement)
        yield records
    finally:
        _pop(records)
        if not _STATE.recorders:
            _rebind(_recording_register_replacement, _STATE.original)


def _pop(records: list[RecordedRewrite]) -> None:
    """Remove the recorder filling ``records`` (by identity: two empty lists are equal)."""
    for i, (recorder, _) in enumerate(_STATE.recorders):
        if recorder is records:
            del _STATE.recorders[i]
            return
