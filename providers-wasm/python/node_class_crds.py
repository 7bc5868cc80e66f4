"""Declares the node class kinds a Python provider serves: appends the file of their
CustomResourceDefinitions (a YAML list, as for a Rust provider's ``declare_node_class_crds!``) to a
built component as its ``capstan:node-class-crds`` custom section.

    python3 node_class_crds.py COMPONENT.wasm CRDS.yaml

componentize-py cannot embed a custom section itself; a custom section may end a component, and
the host reads it wherever it is. Run once per build (a second section is refused by the host)."""

from __future__ import annotations

import sys
from pathlib import Path

SECTION = b"capstan:node-class-crds"


def leb128(n: int) -> bytes:
    """Unsigned LEB128, as the wasm binary format encodes sizes."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def custom_section(name: bytes, data: bytes) -> bytes:
    """A custom section (id 0): the name as a length-prefixed string, then the data."""
    body = leb128(len(name)) + name + data
    return b"\x00" + leb128(len(body)) + body


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    component, crds = Path(argv[1]), Path(argv[2])
    data = crds.read_bytes()
    data.decode("utf-8")  # the host refuses a section that is not UTF-8: fail here instead
    with component.open("ab") as out:
        out.write(custom_section(SECTION, data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
