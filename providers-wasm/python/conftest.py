"""pytest setup for the Python SDK and providers: the contract's bindings (``wit_world``,
``componentize_py_types``) are generated once per session with the componentize-py of the running
interpreter's environment, and the packages are put on ``sys.path``, so the pure logic runs
natively against the real binding types.

The session's bindings are the newest contract's (0.5, which the kwok provider speaks); a test of
an older contract asks :func:`bindings` for that contract's and runs in a subprocess with them (one
interpreter holds one ``wit_world``)."""

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
NEWEST = "0.5"
SDK = HERE / "sdk"


@functools.cache
def bindings(contract: str) -> Path:
    """A directory with the bindings of contract ``contract`` (``0.1`` to ``0.5``), generated once."""
    wit = HERE.parent.parent / "wit" / f"since_v{contract}.0"
    out = Path(tempfile.mkdtemp(prefix=f"capstan-py-bindings-{contract}-"))
    tool = Path(sys.executable).with_name("componentize-py")
    subprocess.run(
        [os.fspath(tool), "-d", os.fspath(wit), "-w", "cloud-provider-world", "bindings", os.fspath(out)],
        check=True,
        capture_output=True,
    )
    return out


for path in (bindings(NEWEST), SDK, HERE / "kwok"):
    sys.path.insert(0, os.fspath(path))


@pytest.fixture
def older_path():
    """``PYTHONPATH`` for a subprocess running the SDK under contract ``contract``'s bindings."""
    return lambda contract: os.pathsep.join(os.fspath(p) for p in (bindings(contract), SDK))
