"""kwok: Capstan's fake-node provider, in Python (the Rust ``providers-wasm/kwok``'s behaviour).

Modules: :mod:`.params` (NodeClass parameters), :mod:`.catalog` (instance types), :mod:`.devices`
(their DRA devices, from Karpenter's DRA KWOK driver's ``DRAConfig``\\ s), :mod:`.selection`
(cheapest compatible offering), :mod:`.node` (the Node object), :mod:`.drift`,
:mod:`.reboot` (the Node patch of a reboot) and :mod:`.repair` (the repair rules)
are pure and tested natively with pytest; :mod:`.provider` is the glue to the export and the
``kube`` import.
"""
