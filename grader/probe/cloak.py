"""Nothing in a rank's process tells the script that it is graded: what would (the grader's
modules, its entries on the import path, its functions' frames under the script's) is put out
of the script's way before it runs.

Why: a script that trains right only when it finds the grader would get the points of one that
always does. The verdicts rest on what the grader's hub carried, which the script cannot write;
but its behaviour should not branch on being graded either. So, before the script runs:

  * every module of the grader (`grader`, `grader.probe.*`, an editable install's finder) leaves
    sys.modules; the objects the probe installed keep theirs alive, and nothing imports them
    again (the probe imports all it needs first);
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
import os
import sys
from types import CodeType, FunctionType

from grader.probe.typed import prepare

RUNPY = "<frozen runpy>"


def _ours(name: str) -> bool:
    return name == "grader" or name.startswith("grader.") or "pdl_grader" in name


def _our_path(entry: object, roots: tuple[str, ...]) -> bool:
    text = str(entry)
    return "pdl_grader" in text or "__editable__" in text or any(text == root or text.startswith(root + os.sep) for root in roots)


def neutral(function: FunctionType, name: str) -> FunctionType:
    """`function` with the file and name runpy's frames show (its code replaced in place)."""
    code: CodeType = function.__code__
    function.__code__ = code.replace(co_filename=RUNPY, co_name=name, co_qualname=name) if hasattr(code, "co_qualname") else code.replace(co_filename=RUNPY, co_name=name)
    return function


def cloak(package_root: str) -> None:
    """Put the grader out of the script's way (the module docstring). `package_root`: the folder
    that holds the grader package (the probe's copy in a sandbox)."""
    roots = (os.path.normpath(package_root),)
    for name in [name for name in sys.modules if _ours(name)]:
        for value in list(vars(sys.modules[name]).values()):
            if isinstance(value, type) and dataclasses.is_dataclass(value):
                prepare(value)  # its annotations refer to its module, which is about to go
        del sys.modules[name]
    sys.path[:] = [entry for entry in sys.path if not _our_path(entry, roots)]
    sys.path_hooks[:] = [hook for hook in sys.path_hooks if not _ours(getattr(hook, "__module__", "") or "")]
    sys.meta_path[:] = [finder for finder in sys.meta_path if not _ours(type(finder).__module__) and not _ours(getattr(finder, "__module__", "") or "")]
    sys.path_importer_cache.clear()
