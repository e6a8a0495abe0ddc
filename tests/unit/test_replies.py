"""What the controller hands back (testbed/config/replies.py): its state file and its
answers to commands, written by the routing app and read by the runner through the same
strict loader, with the keys the files always had."""
from __future__ import annotations

import json

import pytest

from testbed.config.loader import SpecError
from testbed.config.replies import (
    CommandReply,
    ControllerCommand,
    ControllerState,
    GuardReport,
    Reroute,
    Resync,
    command_line,
    read_command,
    read_state,
    refusal,
    reply_data,
    write_state,
)
from testbed.net.controller import merged_state, resync_summary


def state(**changes) -> ControllerState:
    base = dict(
        pid=4242, mode="ecmp", started=10.0, time=12.5, switches=20,
        connected={"1": 10.5, "2": 10.6}, ready={"1": 11.0}, counters={"1": {"packet_out": 3}},
        ports_down=["e1-eth3"],
        reroutes=[Reroute(time=11.5, port="e1-eth3", down=True, ports_down=1, changes=40,
                          switches=12, unsent=0, decided_s=0.004),
                  Reroute(time=12.0, routing="ecmp -> single", changes=36, unsent=0)],
        resync=False, resyncs=[],
        plugin_guard=GuardReport(plugins={"my_app": {"flood_confined": 2}},
                                 packet_outs={"1": 5}),
        commands=[CommandReply(id=1, time=12.0, op="routing", mode="single", changes=36,
                               switches=20, unsent=0, decided_s=0.01),
                  CommandReply(id=2, time=12.2, op="routing", mode="hedera",
                               error="routing mode 'hedera': one of ecmp, single")])
    return ControllerState(**{**base, **changes})


def test_the_state_file_keeps_its_keys_and_reads_back_the_same(tmp_path):
    path = tmp_path / "controller_state.json"
    assert read_state(path) is None  # none written yet
    write_state(state(), path)
    text = path.read_text()
    assert "\n" not in text  # one line, as the app always wrote it
    data = json.loads(text)
    assert list(data) == ["pid", "mode", "started", "time", "switches", "connected", "ready",
                          "counters", "ports_down", "reroutes", "resync", "resyncs",
                          "plugin_guard", "commands"]
    # a record has the keys of what happened, in the order the app wrote them
    assert list(data["reroutes"][0]) == ["time", "port", "down", "ports_down", "changes",
                                         "switches", "unsent", "decided_s"]
    assert data["reroutes"][1] == {"time": 12.0, "routing": "ecmp -> single", "changes": 36,
                                   "unsent": 0}
    assert list(data["commands"][0]) == ["id", "time", "op", "mode", "changes", "switches",
                                         "unsent", "decided_s"]
    assert data["commands"][1] == {"id": 2, "time": 12.2, "op": "routing", "mode": "hedera",
                                   "error": "routing mode 'hedera': one of ecmp, single"}
    assert data["plugin_guard"] == {"plugins": {"my_app": {"flood_confined": 2}},
                                    "packet_outs": {"1": 5}}
    assert read_state(path) == state()
    assert reply_data(read_state(path)) == data  # what a script's controller_state() returns


def test_a_state_file_of_another_shape_is_an_error_naming_the_field(tmp_path):
    path = tmp_path / "controller_state.json"
    data = reply_data(state())
    data["reroutes"][0]["changes"] = "40"
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError, match=r"controller_state\.reroutes\[0\]\.changes"):
        read_state(path)
    path.write_text(json.dumps({**reply_data(state()), "paths": 3}))
    with pytest.raises(SpecError, match="paths: unknown key"):
        read_state(path)
    path.write_text("{not json")
    assert read_state(path) is None  # half a file is never seen (replaced atomically)


def test_a_command_crosses_as_one_line_and_reads_back():
    cmd = ControllerCommand(id=3, op="routing", mode="single", time=100.25)
    line = command_line(cmd)
    assert line == '{"id": 3, "op": "routing", "mode": "single", "time": 100.25}\n'
    assert read_command(line) == cmd
    assert read_command('{"op": "reboot"}') == ControllerCommand(op="reboot")
    with pytest.raises(SpecError, match="command.id: expected an integer"):
        read_command('{"id": "3", "op": "routing"}')


def test_a_line_that_is_no_command_is_answered_under_its_id():
    bad = '{"id": 4, "op": "routing", "mode": "single", "colour": "red"}'
    with pytest.raises(SpecError) as exc:
        read_command(bad)
    reply = refusal(bad, str(exc.value), 7.5)
    assert (reply.id, reply.time, reply.op, reply.mode) == (4, 7.5, None, None)
    assert reply.error is not None and reply.error.startswith("not a command: command.colour")
    assert refusal("not json", "Expecting value", 1.0).id is None
    assert refusal('{"id": true}', "x", 1.0).id is None  # a bool is not an id


def test_a_restarts_counters_and_reroutes_add_to_its_predecessors():
    old = state(counters={"1": {"packet_out": 3, "packet_in": 1}, "2": {"packet_out": 1}},
                reroutes=[Reroute(time=1.0, routing="ecmp -> single", changes=5, unsent=0)])
    new = state(counters={"1": {"packet_out": 4}}, reroutes=[], resync=True)
    merged = merged_state([old], new)
    assert merged.counters == {"1": {"packet_out": 7, "packet_in": 1}, "2": {"packet_out": 1}}
    assert merged.reroutes == old.reroutes and merged.resync
    assert merged_state([], new) is new


def test_a_resync_is_summed_over_the_switches():
    resyncs = [Resync(time=1.0, switch="e1", rules_read=30, groups_read=4, kept=2, changes=1,
                      ops={"add_rule": 1}, took_s=0.02),
               Resync(time=1.1, switch="e2", rules_read=28, groups_read=4, kept=0, changes=0,
                      ops={}, took_s=0.05)]
    assert resync_summary(resyncs) == {"switches": 2, "rules_read": 58, "groups_read": 8,
                                       "kept": 2, "changes": 1, "took_s_max": 0.05}
    assert resync_summary([])["took_s_max"] is None
