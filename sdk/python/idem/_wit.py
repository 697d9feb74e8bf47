"""The one door to the bindings componentize-py generates from wit/.

componentize-py writes a ``wit_world`` package (and ``componentize_py_types``)
into every component it builds, so inside a component these imports always
succeed. Outside one (``python3 -m pydoc idem``, or unit tests run without
generated bindings) they do not: the names then stand for placeholders, so
that ``import idem`` still works and only a call that would reach the host
fails, saying why. The type checker always sees the real bindings (the check
script generates them and puts them on MYPYPATH).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from componentize_py_types import Err as Err
    from wit_world import WitWorld as WitWorld
    from wit_world.imports import config as config
    from wit_world.imports import db as db
    from wit_world.imports import emit as emit
    from wit_world.imports import http as http
    from wit_world.imports import log as log
    from wit_world.imports import origin as origin
    from wit_world.imports import types as types

    AVAILABLE: bool
else:
    try:
        from componentize_py_types import Err
        from wit_world import WitWorld
        from wit_world.imports import config, db, emit, http, log, origin, types

        AVAILABLE = True
    except ImportError:
        from types import ModuleType

        AVAILABLE = False

        class _Absent(ModuleType):
            def __getattr__(self, name):
                raise RuntimeError(
                    f"idem: {self.__name__}.{name} exists only inside a component "
                    "(build the handler with scripts/sdk/build-python)"
                )

        class Err(Exception):
            """Stands in for componentize_py_types.Err; never raised here."""

        class WitWorld:
            """Stands in for the generated export protocol."""

        config, db, emit, http, log, origin, types = (
            _Absent(f"wit_world.imports.{name}")
            for name in ("config", "db", "emit", "http", "log", "origin", "types")
        )
