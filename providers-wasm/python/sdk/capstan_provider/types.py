"""The contract's plain data types (``capstan:provider/types``), whichever contract the component
is built against: componentize-py names the module ``types`` for 0.1 and ``capstan_provider_types``
for 0.2 (whose world also imports ``wasi:http/types``). Import them from here::

    from capstan_provider.types import NodeClaim, ProviderError_Invalid
"""

# ruff: noqa: F403
try:
    from wit_world.imports.capstan_provider_types import *
except ModuleNotFoundError:
    from wit_world.imports.types import *
