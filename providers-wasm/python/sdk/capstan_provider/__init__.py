"""Guest SDK for Capstan providers written in Python (componentize-py).

A provider is a WebAssembly component implementing ``capstan:provider/cloud-provider-world`` of
one contract, 0.1.0 to 0.5.0 (``wit/since_v0.1.0/provider.wit`` to ``wit/since_v0.5.0``).
componentize-py generates the bindings (the ``wit_world`` package) from the contract's WIT; this
package works with the bindings of any of them, answering in the shape of the one the component is
built against, and adds what every provider needs on top of them:

- :mod:`.catalog`: :class:`~.catalog.CatalogBuilder` fills the flat instance-type catalog
  ``get-instance-types`` returns; :func:`~.catalog.expand` reads one back.
- :mod:`.requirements`: requirement constructors (``in_``, ``not_in``, ``gt``, ...) and
  Karpenter's matching rules (:class:`~.requirements.Requirements`).
- :mod:`.quantity`: Kubernetes quantities as exact integers.
- :mod:`.resources`: resource lists with fit checks.
- :mod:`.labels`: well-known labels, taints and values.
- :mod:`.kube`: the ``kube`` import with JSON decoded and errors mapped onto the contract's.
- :mod:`.errors`: the contract's ``provider-error`` cases as exceptions to raise.
- :mod:`.params`: NodeClass parameters with errors that name the field.
- :mod:`.host`: log, sleep, clock and the per-provider cache.
- :mod:`.provider`: a base class with every export stubbed.
- :mod:`.lifecycle`: what contract 0.4 adds (repair rules, reboot errors, registration answers,
  volume limits), with answers that fit whichever contract the component is built against.
- :mod:`.devices`: what contract 0.5 adds, the DRA devices of instance types
  (:class:`~.devices.SliceBuilder`, :class:`~.devices.DeviceBuilder`,
  :class:`~.devices.DeviceTemplates`); :func:`~.catalog.expand_devices` reads them back.

Everything but the host imports runs natively, so provider logic is tested with pytest.
"""

__version__ = "0.1.0"
