"""Nothing in a rank's process tells the script that it is graded: what would (the grader's
modules, its entries on the import path, its functions' frames under the script's) is put out
of the script's way before it runs.

Why: a script that trains right only when it finds the grader would get the points of one that
always does. The verdicts rest on what the grader's hub carried, which the script cannot write;
but its behaviour should not branch on being graded either. So, before the script runs:

  * every module of the grader (`grader`, `grader.probe.*`, an editable install's finder) leaves
    sys.modules; the objects the probe installed keep theirs alive. One who asks for one by its
    name (torch.compile does, for a hook of the recorder it traces) gets the same module object
    back from a finder at the end of sys.meta_path, and it is in sys.modules again from then on;
  * the grader's entries leave sys.path, sys.path_hooks and sys.meta_path (the probe's own
    import hook for late patches stays, under importlib's name);
  * the functions on the stack under the script (the launcher's and the rank's) carry the name
    and file CPython's own runpy frames carry, so a traceback or inspect.stack() shows
    "<frozen runpy>" below the script, as under `python -m`.

What is not hidden: the process group's behaviour and timing, and the probe's hooks inside torch
(a script that inspects torch's internals finds them). A script that finds them gains nothing:
the grader judges what its ranks sent.
"""
from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from types import CodeType, FunctionType, ModuleType
from typing import Any

from grader.probe.typed import prepare

RUNPY = "<frozen runpy>"


def _ours(name: str) -> bool:
    return name == "grader" or name.startswith("grader.") or "pdl_grader" in name


def _our_path(entry: object, roots: tuple[str, ...]) -> bool:
    """An import-path entry of the grader's: the folder that holds the package (not what lies
    below it: a checkout's .venv may), or an editable install's hook."""
    text = str(entry)
    return "pdl_grader" in text or "__editable__" in text or os.path.normpath(text) in roots


def neutral(function: FunctionType, name: str) -> FunctionType:
    """`function` with the file and name runpy's frames show (its code replaced in place)."""
    code: CodeType = function.__code__
    function.__code__ = code.replace(co_filename=RUNPY, co_name=name, co_qualname=name) if hasattr(code, "co_qualname") else code.replace(co_filename=RUNPY, co_name=name)
    return function


class _Loader(importlib.abc.Loader):
    """Hands back a module already loaded."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self._module

    def exec_module(self, module: ModuleType) -> None:
        return None


class _Hidden(importlib.abc.MetaPathFinder):
    """Finds the grader's modules that left sys.modules, for one who imports them by name."""

    def __init__(self, modules: dict[str, ModuleType]) -> None:
        self._modules = modules

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        module = self._modules.get(fullname)
        if module is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Loader(module), is_package=hasattr(module, "__path__"))


_Loader.__module__ = _Hidden.__module__ = "importlib._bootstrap_external"  # in sys.meta_path for the whole run


def cloak(package_root: str) -> None:
    """Put the grader out of the script's way (the module docstring). `package_root`: the folder
    that holds the grader package (the probe's copy in a sandbox)."""
    roots = (os.path.normpath(package_root),)
    hidden = {}
    for name in [name for name in sys.modules if _ours(name)]:
        for value in list(vars(sys.modules[name]).values()):
            if isinstance(value, type) and dataclasses.is_dataclass(value):
                prepare(value)  # its annotations refer to its module, which is about to go
        hidden[name] = sys.modules.pop(name)
    sys.path[:] = [entry for entry in sys.path if not _our_path(entry, roots)]
    sys.path_hooks[:] = [hook for hook in sys.path_hooks if not _ours(getattr(hook, "__module__", "") or "")]
    sys.meta_path[:] = [finder for finder in sys.meta_path if not _ours(type(finder).__module__) and not _ours(getattr(finder, "__module__", "") or "")]
    sys.path_importer_cache.clear()
    sys.meta_path.append(_Hidden({name: module for name, module in hidden.items() if name.startswith("grader")}))
