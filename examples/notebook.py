# %% [markdown]
# # A fabric in a notebook
#
# Cells (`# %%`, the percent format of VS Code, Spyder and jupytext) that start a
# leaf-spine, run TCP flows across it in two rounds, stop it, then read the run back as
# pandas DataFrames and plot them. Each cell runs on its own in an editor's interactive
# window or in Jupyter (`jupytext --to notebook examples/notebook.py`), as root; the file
# also runs whole:
#
#     sudo .venv/bin/python examples/notebook.py [OUT_DIR]

# %%
import sys

from testbed.api import Testbed
from testbed.results import load

SPEC = {"name": "notebook",
        "topology": {"kind": "leafspine",
                     "params": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2}},
        "links": {"rate_mbps": 20, "mtu_bytes": 9000}}
# a results directory given on the command line (a notebook's kernel has its own argv)
OUT = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else None

tb = Testbed(SPEC, out=OUT).start()   # the fabric stays up across the cells below
fab = tb.fabric()

# %% one flow across the spines, alone
alone = fab.flows([("h1", "h3")], duration_s=3)
print(alone[0].goodput_mbps, "Mb/s")

# %% every host of leaf 1 to one of leaf 2 and back: four flows over the two spines
crossing = fab.flows([("h1", "h3"), ("h2", "h4"), ("h3", "h1"), ("h4", "h2")], duration_s=3)
print([round(r.goodput_mbps, 2) for r in crossing])

# %% stop the fabric (the results are written), then read them back
tb.stop()
run = load(tb.out_dir)
flows = run.script_flows             # metrics/script_flows.csv as a DataFrame
print(flows[["call", "src", "dst", "goodput_mbps", "retransmits_pkts"]])
per_call = flows.groupby("call")["goodput_mbps"].agg(["count", "sum", "min"])
print(per_call)

# %% a plot of each flow's goodput, per call (inline in a notebook; a file either way)
import matplotlib.pyplot as plt  # noqa: E402

fig, ax = plt.subplots(figsize=(6, 3.5))
for call, rows in flows.groupby("call"):
    ax.bar([f"{call}: {s}->{d}" for s, d in zip(rows["src"], rows["dst"])],
           rows["goodput_mbps"], label=f"call {call}")
ax.axhline(20, ls="--", c="grey", lw=0.8, label="a link's rate")
ax.set_ylabel("goodput (Mb/s)")
ax.tick_params(axis="x", rotation=30)
ax.legend()
fig.tight_layout()
figure = tb.out_dir / "plots" / "notebook_flows.png"
figure.parent.mkdir(exist_ok=True)
fig.savefig(figure)
print(f"plot: {figure}")
