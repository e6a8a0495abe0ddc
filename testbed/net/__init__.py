"""The emulated network: the fabric (Mininet, Open vSwitch), its queues and traffic-class
dataplane (tc, the BPF program and its live API), the controller process, and the processes
run in its hosts."""
