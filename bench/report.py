"""The report: ``<stem>.json`` (everything), ``<stem>.md`` (tables, targets, verdicts) and PNG
plots (latency distributions, ours beside the baseline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.blocked import blocked_handler_md
from bench.forced import forced_release_md
from bench.report_deploy import deploy_md
from bench.report_fastpaths import fast_paths_md
from bench.report_production import crash_production_md, density_cpu_md, load_md
from bench.report_sections import capacity_md, consumed_md, model_md
from bench.report_start_burst import start_burst_md
from bench.scale_in import scale_in_md
from bench.throttle import throttle_md

__all__ = ["markdown", "write_report"]

FIGURES = [("start", "start latency (insert -> first message handled)"),
           ("graceful_n10", "graceful handover, N = 10 (SIGTERM -> handling again)"),
           ("graceful_n100", "graceful handover, N = 100"),
           ("crash_n10", "crash failover, N = 10 (SIGKILL -> handling again)"),
           ("crash_n100", "crash failover, N = 100"),
           ("stop", "stop latency (STOPPED written -> upstream connection closed)")]


def _fmt(d: dict[str, Any] | None) -> str:
    if not d or not d.get("n"):
        return "-"
    return f"{d['p50']:.2f} / {d['p99']:.2f} / {d['max']:.2f} (n={d['n']})"


def _targets(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    ours = r.get("ours", {})
    lease = ours.get("timing", {}).get("lease_s", 4.0)

    def p(name: str, key: str) -> float | None:
        v = ours.get(name, {}).get("latency_s", {}).get(key)
        return float(v) if v is not None else None

    def judge(value: float | None, limit: float) -> str:
        return "not measured" if value is None else ("met" if value <= limit else "NOT met")

    rows = [("start p99 <= 1 s", f"{p('start', 'p99')}", judge(p("start", "p99"), 1.0)),
            ("graceful handover p99 <= 1 s at N = 100, zero seq gap",
             f"{p('graceful_n100', 'p99')} s, gap {ours.get('graceful_n100', {}).get('seq_gap')}",
             judge(p("graceful_n100", "p99"), 1.0)
             if not ours.get("graceful_n100", {}).get("seq_gap") else "NOT met (gap)"),
            (f"crash failover max <= lease + 1 s ({lease + 1:g} s)",
             f"{max(filter(None, [p('crash_n10', 'max'), p('crash_n100', 'max')]), default=None)}",
             judge(max(filter(None, [p("crash_n10", "max"), p("crash_n100", "max")]),
                       default=None), lease + 1)),
            ("stop p99 <= 1 s", f"{p('stop', 'p99')}", judge(p("stop", "p99"), 1.0))]
    for d in r.get("density", []):
        if "rss_per_connection_kb" in d:
            rows.append((f"<= 64 KB RSS per connection ({d['streams']} connections)",
                         f"{d['rss_per_connection_kb']} KB",
                         "met" if d["rss_per_connection_kb"] <= 64 else "NOT met"))
    cost = ours.get("cost", {})
    if cost:
        rows.append(("lease writes per connection-hour <= seed's 720 (5 s heartbeat)",
                     f"{cost['lease_writes_per_conn_hour']} writes in "
                     f"{cost['write_round_trips_per_conn_hour']} round trips",
                     "met" if cost["lease_writes_per_conn_hour"] <= 720 * 1.05 else "NOT met"))
    return rows


def markdown(r: dict[str, Any]) -> str:
    """The whole report; a partial run (capacity, model or cost scenario only) renders only
    the sections it has figures for."""
    quick = ", quick" if r.get("quick") else ""
    out = [f"# Holdfast benchmark report ({r.get('date', '?')}{quick})", ""]
    if r.get("ours") or r.get("baseline") or r.get("density"):
        out += _latency_and_density(r)
    if r.get("capacity"):
        out += capacity_md(r["capacity"])
    if r.get("model"):
        out += model_md(r["model"])
    if r.get("start_burst"):
        out += start_burst_md(r["start_burst"])
    if r.get("blocked_handler"):
        out += blocked_handler_md(r["blocked_handler"])
    if r.get("throttle"):
        out += throttle_md(r["throttle"])
    if r.get("crash_production"):
        out += crash_production_md(r["crash_production"])
    if r.get("fast_paths"):
        out += fast_paths_md(r["fast_paths"])
    if r.get("forced_release"):
        out += forced_release_md(r["forced_release"])
    if r.get("deploy"):
        out += deploy_md(r["deploy"])
    if r.get("scale_in"):
        out += scale_in_md(r["scale_in"])
    if r.get("density_cpu"):
        out += density_cpu_md(r["density_cpu"])
    out += load_md(r)
    if r.get("production_cost"):
        out += consumed_md(r["production_cost"])
    if r.get("ours", {}).get("steady") or r.get("baseline", {}).get("steady"):
        out += _bench_timing_cost(r)
    out += ["Prices assumed (us-east-1 on-demand, free tiers ignored): "
            f"{json.dumps(r.get('prices_usd'))}. Lease items are < 1 KB (1 WRU per write).", ""]
    if r.get("runtime_s") is not None or r.get("logs"):
        out.append(f"Runtime {r.get('runtime_s')} s; logs in `{r.get('logs')}`.")
    return "\n".join(out) + "\n"


def _latency_and_density(r: dict[str, Any]) -> list[str]:
    t = r.get("ours", {}).get("timing", {})
    out = [f"Local fleet on one machine: DynamoDB Local + moto SQS, lease {t.get('lease_s')} s, "
           f"heartbeat {t.get('heartbeat_s')} s, skew allowance {t.get('skew_ms')} ms, sweep "
           f"every {t.get('sweep_interval_ms')} ms. **Baseline** = the seed's polling design: "
           "`bench/seed_worker.py` (acquire, a renewal per lease per heartbeat, release with "
           "expiry 0 and the owner kept), no router and no sweeper, reconciling through the "
           "index every 12 s (60 s scaled like the lease, 20 s -> 4 s). Figures are "
           "p50 / p99 / max in seconds over every stream of every repetition (n).", "",
           "## Latency: ours vs baseline", "", "| figure | ours | baseline |", "|---|---|---|"]
    for key, title in FIGURES:
        out.append(f"| {title} | {_fmt(r.get('ours', {}).get(key, {}).get('latency_s'))} | "
                   f"{_fmt(r.get('baseline', {}).get(key, {}).get('latency_s'))} |")
    out += ["", "Seq gap (seqs never handled) and duplicates across each handover run:", "",
            "| run | ours gap / dups | baseline gap / dups | ours max / lease |",
            "|---|---|---|---|"]
    for key in ("graceful_n10", "graceful_n100", "crash_n10", "crash_n100"):
        o, b = r.get("ours", {}).get(key, {}), r.get("baseline", {}).get(key, {})
        if o or b:
            out.append(f"| {key} | {o.get('seq_gap')} / {o.get('duplicates')} | "
                       f"{b.get('seq_gap')} / {b.get('duplicates')} | "
                       f"{o.get('lease_ratio_max')} |")
    out += ["", "## Targets", "", "| target | measured | verdict |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in _targets(r)]
    out += ["", "## Density (one worker process)", "",
            "| connections | heartbeat | RSS/conn | CPU cores | CPU per 1,000 conns | claim all |",
            "|---|---|---|---|---|---|"]
    for d in r.get("density", []):
        if "error" in d:
            out.append(f"| {d['streams']} | failed: {d['error'][:120]} | | | | |")
        else:
            held = f" ({d['held']} held)" if d.get("held", d["streams"]) != d["streams"] else ""
            out.append(f"| {d['streams']}{held} | {d['heartbeat_s']} s | "
                       f"{d['rss_per_connection_kb']} "
                       f"KB | {d['cpu_cores']} | {d['cpu_cores_per_1000']} | "
                       f"{d['claim_all_s']} s |")
    rc = r.get("renew_cost") or {}
    if "batch" in rc:
        out += ["", f"Client CPU per renewal (boto3 serialisation + signing, {rc['leases']} "
                f"leases): single UpdateItem {rc['single']['client_cpu_ms_per_renewal']} ms "
                f"({rc['single']['calls']} calls), PartiQL batch of 25 "
                f"{rc['batch']['client_cpu_ms_per_renewal']} ms ({rc['batch']['calls']} calls)."]
    return [*out, ""]


def _bench_timing_cost(r: dict[str, Any]) -> list[str]:
    out = ["## Cost at bench timings (counted at the client by a loopback proxy)", ""]
    for mode in ("ours", "baseline"):
        m = r.get(mode, {})
        if not m.get("steady"):
            continue
        s = m["steady"]
        out.append(f"**{mode}**, {s['streams']} streams held for {s['seconds']} s "
                   f"(heartbeat {s['heartbeat_s']} s), per connection-hour:")
        out.append("")
        out.append("| party | operation | calls | items |")
        out.append("|---|---|---|---|")
        for party in ("worker_dynamodb", "worker_sqs", "runner_dynamodb", "runner_sqs"):
            for op, v in sorted(s.get(party, {}).items()):
                out.append(f"| {party} | {op} | {v['calls_per_conn_hour']} | "
                           f"{v['items_per_conn_hour']} |")
        c = m.get("cost")
        if c:
            out += ["", f"Projected to production timing (heartbeat {c['prod_heartbeat_s']} s), "
                    f"{c['connections']} connections on {c['workers']} workers: "
                    f"{c['lease_writes_per_conn_hour']} lease writes per connection-hour in "
                    f"{c['write_round_trips_per_conn_hour']} round trips, "
                    f"{c.get('write_units_per_lease_write', 1)} write units each (table + "
                    f"indexes, as consumed); monthly on-demand **${c['monthly_usd_total']}** "
                    f"({c['monthly_usd']})."]
        if m.get("runner_summary"):
            out.append(f"Router (runner) over the whole {mode} run: `{m['runner_summary']}`")
        out.append("")
    return out


def _plots(r: dict[str, Any], folder: Path, stem: str) -> list[Path]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    keys = [k for k, _ in FIGURES if r.get("ours", {}).get(k, {}).get("samples")]
    if not keys:
        return []
    fig, ax = plt.subplots(figsize=(9, 4.5))
    data, labels = [], []
    for k in keys:
        for mode in ("ours", "baseline"):
            samples = r.get(mode, {}).get(k, {}).get("samples")
            if samples:
                data.append(samples)
                labels.append(f"{k}\n{mode}")
    ax.boxplot(data, whis=(0, 100))
    ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=7)
    ax.set_ylabel("seconds")
    ax.set_title("Holdfast vs the seed's polling design (lease 4 s, heartbeat 1 s)")
    ax.axhline(r.get("ours", {}).get("timing", {}).get("lease_s", 4.0), ls="--", lw=0.8,
               color="grey")
    fig.tight_layout()
    path = folder / f"{stem}-latency.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths = [path]
    dens = [d for d in r.get("density", []) if "rss_per_connection_kb" in d]
    costs = {m: r[m]["cost"]["monthly_usd"] for m in ("ours", "baseline")
             if r.get(m, {}).get("cost")}
    if dens or costs:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.8))
        if dens:
            xs = [str(d["streams"]) for d in dens]
            a1.bar(xs, [d["rss_per_connection_kb"] for d in dens], color="tab:blue")
            a1.axhline(64, ls="--", lw=0.8, color="grey")
            a1.set_title("RSS per connection (KB; target 64)")
            a1.set_xlabel("connections in one worker")
        if costs:
            bottom = [0.0] * len(costs)
            for part in next(iter(costs.values())):
                vals = [c.get(part, 0.0) for c in costs.values()]
                a2.bar(list(costs), vals, bottom=bottom, label=part)
                bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
            a2.set_title("monthly on-demand USD, 500 connections")
            a2.legend(fontsize=7)
        fig.tight_layout()
        p2 = folder / f"{stem}-density-cost.png"
        fig.savefig(p2, dpi=110)
        plt.close(fig)
        paths.append(p2)
    return paths


def write_report(r: dict[str, Any], folder: Path, stem: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    js, md = folder / f"{stem}.json", folder / f"{stem}.md"
    js.write_text(json.dumps(r, indent=1, default=str) + "\n")
    pngs = _plots(r, folder, stem)
    text = markdown(r)
    if pngs:
        text += "\n" + "".join(f"![{p.stem}]({p.name})\n" for p in pngs)
    md.write_text(text)
    return [js, md, *pngs]
