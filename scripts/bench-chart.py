"""Bar chart of scripts/bench's JSON: records/s per variant, without and
with the payment call. Usage: bench-chart.py bench.json bench.png"""
import json
import sys
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

rows = json.load(open(sys.argv[1]))
variants = list(dict.fromkeys(r["variant"] for r in rows))
fig, ax = plt.subplots(figsize=(max(9, 1.1 * len(variants)), 5.5))
width = 0.38
for offset, http in ((-width / 2, False), (width / 2, True)):
    values = [next((r["events_per_s"] for r in rows if r["variant"] == v and r["http"] == http), None) for v in variants]
    at = [i + offset for i, v in enumerate(values) if v is not None]
    bars = ax.bar(at, [v for v in values if v is not None], width, label="with HTTP" if http else "no HTTP")
    ax.bar_label(bars, fmt="%.0f", fontsize=7)
# Each variant's name wrapped under its bars (a variant run only with HTTP
# has no blue bar rather than a zero one).
ax.set_xticks(range(len(variants)), [textwrap.fill(v, 16) for v in variants], fontsize=7)
ax.set_ylabel("records/s (higher is better)")
ax.set_title("idem throughput, one run on this machine")
ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
