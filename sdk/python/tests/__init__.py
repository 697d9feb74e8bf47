"""Unit tests of the SDK's pure-Python parts, run outside wasm:

    cd sdk/python && python3 -m unittest

The parts that build or read the world's types need the bindings
componentize-py generates from wit/. scripts/sdk/check-python puts them on
PYTHONPATH; run plainly, this package generates them into a temporary
directory when componentize-py is installed ($IDEM_TOOLS), and the tests that
need them are skipped when it is not.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import subprocess
import sys
import shutil
import tempfile
from pathlib import Path


def _generate_bindings() -> None:
    if importlib.util.find_spec("wit_world") is not None:
        return
    tools = Path(os.environ.get("IDEM_TOOLS", "/var/tmp/idem-tools"))
    tool = tools / "componentize-py" / "bin" / "componentize-py"
    wit = Path(__file__).resolve().parents[3] / "wit"
    if not tool.exists() or not wit.is_dir():
        return
    tmp = tempfile.mkdtemp(prefix="idem-bindings-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    out = Path(tmp) / "bindings"
    subprocess.run([str(tool), "-q", "-d", str(wit), "-w", "handler", "bindings", str(out)], check=True)
    sys.path.insert(0, str(out))
    # Discovery may have imported idem already (it is a package beside this
    # one), and idem looks for the bindings once: let the tests import it anew.
    for name in [m for m in sys.modules if m == "idem" or m.startswith("idem.")]:
        del sys.modules[name]


_generate_bindings()
