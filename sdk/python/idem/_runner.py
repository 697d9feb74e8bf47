"""The quick test's runner: one component per SDK version that runs a
project's sources as ``idem test --sources DIR`` hands them over, so that
an edit is tested without building a component (``./test.sh --quick``).

componentize-py builds the real component by importing ``app`` at build
time, and that build is what takes seconds (it runs CPython once inside its
own WebAssembly runtime). This runner is built the same way once, with the
SDK and nothing of the project; the project's modules arrive as the
handler's config value ``idem.test.sources`` (a JSON object of path ->
text, set by ``idem test`` only) and are imported on the first event, from
memory. The handler then runs exactly as in its component — same
interpreter, same SDK, same host calls — except that ``app`` is imported at
its first event rather than at build time. ``./build.sh`` still builds the
component that is deployed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import json
import sys
from types import ModuleType
from typing import Any

from . import _wit, config
from ._handler import run

SOURCES = "idem.test.sources"


class _Sources(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Modules from the texts handed over: ``a/b.py`` is ``a.b``,
    ``a/__init__.py`` the package ``a``."""

    def __init__(self, files: dict[str, str]) -> None:
        self.modules: dict[str, tuple[str, str, bool]] = {}
        for path, text in files.items():
            if not path.endswith(".py"):
                continue
            parts = path[:-3].split("/")
            package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if package else parts)
            if name:
                self.modules[name] = (path, text, package)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        found = self.modules.get(name)
        if found is None:
            return None
        spec = importlib.machinery.ModuleSpec(name, self, origin=found[0], is_package=found[2])
        if found[2]:
            spec.submodule_search_locations = []
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        path, text, _ = self.modules[module.__name__]
        exec(compile(text, path, "exec"), module.__dict__)


_app: ModuleType | None = None


def _load() -> ModuleType:
    global _app
    if _app is None:
        given = config.get(SOURCES)
        if given is None:
            raise RuntimeError("the quick runner needs the project's sources: run it with `idem test --sources DIR`")
        sys.meta_path.insert(0, _Sources(json.loads(given)))
        _app = importlib.import_module("app")
    return _app


def _failing(error: BaseException) -> Any:
    """A handler that raises ``error``: the SDK reports it like any other."""

    def fail(event: Any, db: Any) -> None:
        raise error

    return fail


class WitWorld(_wit.WitWorld):
    """The export: the project's ``WitWorld``, once its modules are imported."""

    def handle(self, event: _wit.types.Event) -> None:
        try:
            app = _load()
        except Exception as e:
            # A syntax error, a failed import: the event fails permanently,
            # with its type, message and traceback, as a bug does.
            run(_failing(e), event)
            return
        world = getattr(app, "WitWorld", None)
        if world is None:
            run(_failing(RuntimeError("app.py has no @idem.handler")), event)
            return
        world().handle(event)
