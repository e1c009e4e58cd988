"""Pass factories, and how a reproducer script imports what a live object came from.

A *pass factory* (``verify(pass_factory=...)``) is a module-level function that builds the pass
under test, used as a pass class is: called per case (and per rank of a tensor-parallel case) with
the case's ``pass_config`` when it takes an argument and the case carries one, else with none. What
vLLM's passes need: they are built as ``Pass(vllm_config)`` from a config pmverify's cases do not
carry. A script (a reproducer) or another process (a ``pmverify fuzz`` worker) gets the factory back
by its module and qualified name, or, for a module that is not importable by name from there (the
``__main__`` script, a test module), by the path of its file.

The custom ops of a graph are imported the same way: torch.library records where each was defined
(a ``torch.library.custom_op``'s function; a ``Library.define``'s file, in the dispatcher's
``registered at FILE:LINE``), and the module loaded from that file is what a script imports before
it rebuilds the graph.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["PassFactory", "as_factory", "import_code", "op_origins", "IMPORT_HELPER"]


def _file_of(module_name: str) -> str | None:
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    return os.path.abspath(path) if path else None


def origin(obj: Any) -> tuple[str, str, str | None]:
    """``(module, qualname, file)`` of a module-level function or class ``obj``: what a script needs
    to get it back (``file`` None when its module has none). Raises ``ValueError`` for an object
    that is not reachable from its module by its qualified name (a lambda, a closure, a
    ``functools.partial``, a function replaced by a decorator that did not keep its name)."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        raise ValueError(f"{obj!r} is not a module-level function or class")
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not obj:
        raise ValueError(f"{obj!r} is not {module}.{qualname} (define it at module level under its own name)")
    return module, qualname, _file_of(module)


#: What a script defines once to import a module by name, else from its file (a test module, the
#: ``__main__`` script: loaded under another name so that its ``if __name__ == "__main__"`` block
#: does not run).
IMPORT_HELPER = '''\
def _pmverify_import(name, path):
    """Module ``name``, imported by name, else loaded from ``path`` (the file it was written from)."""
    import importlib
    import importlib.util

    if name != "__main__":
        if name in sys.modules:
            return sys.modules[name]
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if path is None or (exc.name != name and not name.startswith(f"{exc.name}.")):
                raise
        if "." in name:  # a module of a package: import it from the folder holding the package
            root = path
            for _ in range(name.count(".") + 1):
                root = os.path.dirname(root)
            sys.path.insert(0, root)
            return importlib.import_module(name)
    alias = "_pmverify_main" if name == "__main__" else name
    if alias in sys.modules:
        return sys.modules[alias]
    spec = importlib.util.spec_from_file_location(alias, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    sys.path.insert(0, os.path.dirname(path))  # its own imports of modules beside it
    spec.loader.exec_module(module)
    return module
'''


def import_code(module: str, path: str | None, qualname: str | None = None) -> str:
    """A Python expression of a script that defines :data:`IMPORT_HELPER`: the module (or, with
    ``qualname``, the object in it), imported by name, else from ``path``."""
    expr = f"_pmverify_import({module!r}, {path!r})"
    return f"{expr}.{qualname}" if qualname else expr


_REGISTERED_AT = re.compile(r"^debug: registered at (.+):\d+$", re.MULTILINE)


def _loaded_module_of(path: str) -> str | None:
    path = os.path.abspath(path)
    for name, loaded in list(sys.modules.items()):
        file = getattr(loaded, "__file__", None)
        if file and os.path.abspath(file) == path:
            return name
    return None


def _fake_function_module(qualname: str) -> str | None:
    """The module of the function registered as ``qualname``'s fake implementation (torch wraps
    it: the function is found among the wrapper's closure cells), unless it is torch's own."""
    from .._compat import simple_registry

    kernel = simple_registry.singleton.find(qualname).fake_impl.kernel
    func = getattr(kernel, "func", None)
    candidates = [func, *(cell.cell_contents for cell in getattr(func, "__closure__", None) or ())]
    for candidate in candidates:
        module = getattr(candidate, "__module__", None)
        if inspect.isfunction(candidate) and isinstance(module, str) and not module.startswith("torch."):
            return module if _file_of(module) else None
    return None


def op_origins(qualname: str) -> list[tuple[str, str]]:
    """``(module, file)`` of the modules that defined custom op ``qualname`` (``"ns::name"``), from
    what torch.library recorded: a ``torch.library.custom_op``'s function; else the function
    registered as its fake implementation (vLLM's ``direct_register_custom_op`` defines an op
    through a library made in another module, whose file is what the dispatcher records) and the
    file of the ``Library`` the dispatcher names (``registered at FILE:LINE``), matched against the
    loaded modules' files. Empty when none leads to a loaded module (an op of a C++ extension)."""
    from .._compat import custom_ops

    opdef = custom_ops.OPDEFS.get(qualname)
    module = getattr(getattr(opdef, "_init_fn", None), "__module__", None)
    if isinstance(module, str) and _file_of(module):
        return [(module, _file_of(module))]  # type: ignore[list-item]
    import torch

    names = [_fake_function_module(qualname)]
    try:
        found = _REGISTERED_AT.search(torch._C._dispatch_dump(qualname))
    except RuntimeError:
        found = None
    if found is not None:
        names.append(_loaded_module_of(found.group(1)))
    return [(name, _file_of(name)) for name in dict.fromkeys(names) if name is not None and _file_of(name)]  # type: ignore[misc]


@dataclasses.dataclass(frozen=True)
class PassFactory:
    """A pass factory (see the module docstring): ``fn``, and where a script finds it again
    (``module``, ``qualname``, ``file``)."""

    fn: Callable[..., Any]
    module: str
    qualname: str
    file: str | None

    @property
    def takes_config(self) -> bool:
        """Whether ``fn`` takes a positional argument (the case's ``pass_config``)."""
        try:
            parameters = inspect.signature(self.fn).parameters.values()
        except (TypeError, ValueError):
            return True
        return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters)

    def build(self, config: Any) -> Any:
        """The pass for ``config`` (a case's ``pass_config``, None when it carries none):
        ``fn(config)``, or ``fn()`` when ``config`` is None or ``fn`` takes no argument."""
        return self.fn(config) if config is not None and self.takes_config else self.fn()

    def __repr__(self) -> str:
        return f"pass_factory={self.module}.{self.qualname}"


def as_factory(fn: Any, argument: str = "pass_factory") -> PassFactory:
    """``fn`` as a :class:`PassFactory`. Raises ``hypothesis.errors.InvalidArgument`` naming
    ``argument`` and ``fn`` when it is not callable or is a class (give a class as the pass itself)
    or cannot be found again by its module and name (a lambda, a closure, a ``functools.partial``:
    a reproducer or a fuzz worker could not rebuild the pass)."""
    from hypothesis.errors import InvalidArgument

    if isinstance(fn, PassFactory):
        return fn
    if isinstance(fn, type):
        raise InvalidArgument(
            f"{argument}={fn!r} is a class: give it as the pass (built per case from case.pass_config)"
        )
    if not callable(fn):
        raise InvalidArgument(f"{argument}={fn!r} is not callable: give a function that builds the pass")
    try:
        module, qualname, file = origin(fn)
    except ValueError as exc:
        raise InvalidArgument(
            f"{argument}={fn!r} cannot be imported by its module path ({exc}): a reproducer and a fuzz "
            "worker rebuild the pass from it; define it at module level"
        ) from None
    return PassFactory(fn, module, qualname, file)
