"""The switches' and hosts' dataplane as the kernel and OVS hold it: OVS commands, per-port
HTB queues, the BPF traffic-class program, its live API through bpf(2), and fast netlink
qdisc reads. Imported by the network, measurement, the live view and the controller apps."""
