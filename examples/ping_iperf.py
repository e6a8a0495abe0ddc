"""An experiment script: a Fat-Tree k=4 at 10 Mb/s with ECMP, a ping and a 3 s iperf3 flow
across the core, printed and written to a results directory like `testbed run`'s.

    sudo .venv/bin/python examples/ping_iperf.py [OUT]
"""
import json
import sys

from testbed.api import Testbed

SPEC = {"name": "example-ping-iperf",
        "topology": {"kind": "fattree", "params": {"k": 4}},
        "links": {"rate_mbps": 10}}


def main(out: str | None = None) -> dict:
    with Testbed(SPEC, out=out) as tb:
        fab = tb.fabric()
        h1, h16 = fab.host("h1"), fab.host("h16")
        ping = h1.run(["ping", "-c", "3", "-i", "0.2", h16.ip], check=True)
        print(ping.stdout.strip().splitlines()[-1])  # rtt min/avg/max
        server = h16.start(["iperf3", "-s", "-1", "-p", "5201"])
        fab.wait_listening([("h16", 5201)])
        client = h1.run(["iperf3", "-c", h16.ip, "-p", "5201", "-t", "3", "--json"],
                        timeout=30, check=True)
        fab.stop([server])
        mbps = json.loads(client.stdout)["end"]["sum_received"]["bits_per_second"] / 1e6
        print(f"h1 -> h16: {mbps:.2f} Mb/s over a 10 Mb/s fabric")
        result = {"ping_ok": " 0% packet loss" in ping.stdout, "mbps": mbps}
        (tb.out_dir / "example.json").write_text(json.dumps(result))
    print(f"results: {tb.out_dir}")
    return result


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
