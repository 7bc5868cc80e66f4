"""pytest setup for the Python SDK and providers: the contract's bindings (``wit_world``,
``componentize_py_types``) are generated once per session with the componentize-py of the running
interpreter's environment, and the packages are put on ``sys.path``, so the pure logic runs
natively against the real binding types."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WIT = HERE.parent.parent / "wit" / "since_v0.1.0"

_bindings = Path(tempfile.mkdtemp(prefix="capstan-py-bindings-"))
_tool = Path(sys.executable).with_name("componentize-py")
subprocess.run(
    [os.fspath(_tool), "-d", os.fspath(WIT), "-w", "cloud-provider-world", "bindings", os.fspath(_bindings)],
    check=True,
    capture_output=True,
)
for path in (_bindings, HERE / "sdk", HERE / "kwok"):
    sys.path.insert(0, os.fspath(path))
