"""The configuration layer: every spec type, its checks and its defaults, and the strict
loader that turns YAML or JSON into frozen dataclasses. It imports nothing of the runtime
(no Mininet, pyroute2, torch, Ryu; no fabric, dataplane or monitor module), so that
`testbed validate` and the controller's apps can load a configuration without it.

    loader.py      strict conversion (unknown keys, wrong types: an error with the field's
                   path), YAML and JSON files
    units.py       facts every layer computes alike: frame size, TCP payload, HTB burst,
                   class ids
    network.py     topology, links, hosts
    qos.py         traffic classes, ECN and PFC, their checks and the buffer precedence
    controller.py  routing, Hedera, flow priorities, and the per-phase controller file
    replies.py     what the controller hands back: its state file, its answers to the
                   runner's commands, the PFC app's event log
    spec.py        the spec itself and the base of every experiment's spec type
"""
