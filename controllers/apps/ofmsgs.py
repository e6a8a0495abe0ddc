"""Small builders that turn pure routing data into OpenFlow 1.3 messages (cf. faucet's
valve_of). They take a Ryu datapath only for its ofproto/parser and never send anything."""
from __future__ import annotations

from controllers.apps.compat import arp, ethernet, nicira_ext, packet
from controllers.plans import HASH_FIELDS_L3L4_UDP
from controllers.plugin_guard import COOKIE_BAND
from controllers.routing import Group, Rule

COOKIE = 0x7E57BED  # marks every entry the testbed installs


def clear_all(dp) -> list:
    """Every entry and group, except the entries of plugins (the cookie band of
    controllers/plugin_guard.py: a plugin may set its entries up before the router does)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return [parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                              cookie=0, cookie_mask=COOKIE_BAND,
                              out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY),
            parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL)]


def group_mod(dp, group: Group, op: str = "add") -> object:
    """Add, modify or delete a select or fast-failover group. Each bucket watches its port:
    OVS skips the bucket of a port that is down by itself, before the controller hears of
    it (a fast-failover group forwards by its first live bucket)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    command = {"add": ofp.OFPGC_ADD, "modify": ofp.OFPGC_MODIFY, "delete": ofp.OFPGC_DELETE}[op]
    ff = group.kind == "ff"
    buckets = [parser.OFPBucket(weight=0 if ff else 1,
                                # the ingress port is up: the packet just came in on it
                                watch_port=ofp.OFPP_ANY if port == ofp.OFPP_IN_PORT else port,
                                watch_group=ofp.OFPG_ANY,
                                actions=[parser.OFPActionOutput(port)])
               for port in group.buckets] if op != "delete" else []
    return parser.OFPGroupMod(dp, command=command, type_=ofp.OFPGT_FF if ff else ofp.OFPGT_SELECT,
                              group_id=group.group_id, buckets=buckets)


def flow_mod(dp, rule: Rule, modify: bool = False) -> object:
    """Add `rule` (or, `modify`, change the actions of the entry with its exact match and
    priority, keeping its counters)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions(dp, rule))]
    return parser.OFPFlowMod(dp, cookie=COOKIE, priority=rule.priority,
                             command=ofp.OFPFC_MODIFY_STRICT if modify else ofp.OFPFC_ADD,
                             idle_timeout=rule.idle_timeout,
                             match=parser.OFPMatch(**dict(rule.match)), instructions=inst)


def flow_delete(dp, rule: Rule) -> object:
    """Remove the entry with exactly `rule`'s match and priority."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return parser.OFPFlowMod(dp, cookie=COOKIE, cookie_mask=0xFFFFFFFFFFFFFFFF,
                             priority=rule.priority, command=ofp.OFPFC_DELETE_STRICT,
                             table_id=0, out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                             match=parser.OFPMatch(**dict(rule.match)))


def change(dp, c) -> object:
    """The message for one `controllers.recovery.Change`."""
    if isinstance(c.item, Group):
        return group_mod(dp, c.item, c.op)
    if c.op == "delete":
        return flow_delete(dp, c.item)
    return flow_mod(dp, c.item, modify=c.op == "modify")


def actions(dp, rule: Rule) -> list:
    """The OpenFlow actions of a rule (empty: drop, but counted)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    acts = []
    if rule.set_dscp is not None:
        acts.append(parser.OFPActionSetField(ip_dscp=rule.set_dscp))
    if rule.to_controller:  # alone: to the controller; with a forward: a copy
        acts.append(parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER))
    if rule.group_id is not None:
        acts.append(parser.OFPActionGroup(rule.group_id))
    elif rule.out_port is not None:
        acts.append(parser.OFPActionOutput(rule.out_port))
    elif rule.hash_ports:
        acts.append(parser.NXActionBundle(
            algorithm=nicira_ext.NX_BD_ALG_HRW, fields=HASH_FIELDS_L3L4_UDP,
            basis=rule.hash_basis, slave_type=nicira_ext.NXM_OF_IN_PORT,
            n_slaves=len(rule.hash_ports), ofs_nbits=0, dst=0, slaves=list(rule.hash_ports)))
    return acts


def port_is_down(dp, desc) -> bool:
    """A port (OFPPort, from a port-status message or a port description) that carries
    nothing: its link is down or it is administratively down."""
    ofp = dp.ofproto
    return bool(desc.state & ofp.OFPPS_LINK_DOWN) or bool(desc.config & ofp.OFPPC_PORT_DOWN)


def read_rule(dp, stat) -> Rule:
    """The `Rule` an entry of a flow-stats reply is, as `flow_mod` would have written it:
    what a restarted controller compares with its plan."""
    ofp = dp.ofproto
    out_port = group_id = set_dscp = None
    to_controller = False
    hash_ports: tuple[int, ...] = ()
    hash_basis = 0
    for inst in stat.instructions:
        for act in getattr(inst, "actions", []):
            if isinstance(act, dp.ofproto_parser.NXActionBundle):
                hash_ports, hash_basis = tuple(act.slaves), act.basis
            elif act.cls_action_type == ofp.OFPAT_OUTPUT:
                if act.port == ofp.OFPP_CONTROLLER:
                    to_controller = True
                else:
                    out_port = act.port
            elif act.cls_action_type == ofp.OFPAT_GROUP:
                group_id = act.group_id
            elif act.cls_action_type == ofp.OFPAT_SET_FIELD and act.key == "ip_dscp":
                set_dscp = act.value
    return Rule(dpid=dp.id, priority=stat.priority, match=tuple(sorted(stat.match.items())),
                out_port=out_port, group_id=group_id, to_controller=to_controller,
                idle_timeout=stat.idle_timeout, set_dscp=set_dscp, hash_ports=hash_ports,
                hash_basis=hash_basis)


def read_group(dp, desc) -> Group:
    """The `Group` an entry of a group-description reply is (its buckets' output ports,
    in order)."""
    ofp = dp.ofproto
    ports = tuple(act.port for bucket in desc.buckets for act in bucket.actions
                  if act.cls_action_type == ofp.OFPAT_OUTPUT)
    return Group(dpid=dp.id, group_id=desc.group_id, buckets=ports,
                 kind="ff" if desc.type == ofp.OFPGT_FF else "select")


def packet_out(dp, port: int, data: bytes) -> object:
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                               actions=[parser.OFPActionOutput(port)], data=data)


def arp_reply_frame(request: arp.arp, answer_mac: str) -> bytes:
    """An ARP reply to `request`, saying that its target IP is at `answer_mac`."""
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=request.src_mac, src=answer_mac, ethertype=0x0806))
    pkt.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=answer_mac, src_ip=request.dst_ip,
                             dst_mac=request.src_mac, dst_ip=request.src_ip))
    pkt.serialize()
    return bytes(pkt.data)
