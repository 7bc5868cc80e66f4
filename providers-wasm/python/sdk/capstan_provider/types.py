"""The contract's plain data types (``capstan:provider/types``), whichever contract the component
is built against: componentize-py names the module ``types`` for 0.1 and ``capstan_provider_types``
for 0.2 and later (whose worlds also import ``wasi:http/types``). What 0.4 adds is in
:mod:`capstan_provider.lifecycle`. Import them from here::

    from capstan_provider.types import NodeClaim, ProviderError_Invalid
"""

# ruff: noqa: F403
try:
    from wit_world.imports.capstan_provider_types import *
except ModuleNotFoundError:
    from wit_world.imports.types import *
