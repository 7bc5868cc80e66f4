"""The component's entry module: componentize-py exports ``CloudProvider`` as the contract's
``cloud-provider`` interface."""

from kwok_provider.provider import Kwok


class CloudProvider(Kwok):
    """The exported provider."""
