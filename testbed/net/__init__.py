"""The emulated network: the fabric (Mininet, Open vSwitch), the controller process, the
processes run in its hosts, faults, and a server's dataplane agent. The queues and the
traffic-class dataplane it installs are `testbed/dataplane/`."""
