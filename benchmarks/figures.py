"""The benchmark figures the docs quote, rendered from the stored results in ``benchmarks/results/``.

A doc quotes figures only inside a marked block, whose text is this module's rendering of one results file::

    <!-- figures:reactive reactive.json -->
    ...
    <!-- /figures -->

``python benchmarks/figures.py`` rewrites every block of README.md, benchmarks/README.md and docs/architecture.md
from the stored JSON (run it after storing a new run); ``--check`` only reports the blocks that differ
(``tests/unit/test_benchmark_figures.py`` runs the same check).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOCS = ("README.md", "benchmarks/README.md", "docs/architecture.md")
BLOCK = re.compile(r"<!-- figures:(?P<kind>[\w-]+) (?P<files>[^>]+?) -->\n(?P<text>.*?)<!-- /figures -->", re.S)


def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def rate(x: float | None) -> str:
    """Rows per second: ``2.84 M``, ``0.88 M``, ``0.057 M``, ``2.85 k``."""
    if x is None:
        return "—"
    if x >= 1e5:
        return f"{x / 1e6:.2f} M"
    return f"{x / 1e6:.3f} M" if x >= 1e4 else f"{x / 1e3:.2f} k"


def ratio(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.1f}×" if x >= 10 else f"{x:.2f}×"


def when(created: str) -> str:
    """``2026-11-22T01:34:51+0000`` -> ``2026-11-22 01:34``."""
    return created[:16].replace("T", " ")


def seconds(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


# -- one renderer per kind of results file ------------------------------------------------------------------
REACTIVE_JOBS = {"headwater_spark": "headwater on Spark, end to end", "kernels_alone": "kernels alone, 1 process",
                 "kernels_parallel": "kernels, one process per task", "polars": "polars `.over(key)`",
                 "pandas": "pandas, grouped (on a sample)"}


def reactive(name: str) -> str:
    r = load(name)
    lines = [f"Run of {when(r['created'])} (`results/{name}`): {r['rows']:,} rows, {r['keys']:,} keys, "
             f"{r['metrics']} metrics, {r['batch']:,}-row appends, `parallelize(key, {r['tasks']})`, {r['cpus']} CPUs"
             + (", cold (no warm-up batch)." if r.get("cold") else "."),
             "", "| job | rows/s | wall s | the clock |", "| --- | ---: | ---: | --- |"]
    for key, label in REACTIVE_JOBS.items():
        lines.append(f"| {label} | {rate(r['rows_per_s'][key])} | {seconds(r['seconds'][key])} | {r['clock'][key]} |")
    split = " / ".join(f"{k} {v:.2f}" for k, v in r["task_seconds_by_stage"].items())
    lines += ["", f"Task-seconds by stage on Spark: {split}."]
    if r.get("converted"):
        lines.append(f"Converted: {r['converted']}.")
    return "\n".join(lines) + "\n"


INDICATOR_JOBS = ("headwater", "pyspark batch", "pyspark streaming")


def indicators(name: str) -> str:
    r = load(name)
    s, p = r["summary"], r["parameters"]
    commit = (r["versions"].get("headwater_git") or {}).get("commit", "")[:7]
    lines = [f"Run of {when(r['created'])} (`results/{name}`, Headwater at {commit}): {s['ticks_per_day']:,} ticks "
             f"a day, {p['chunk']:,} per append, 1 cold and {p['repeat']} warm runs (median); load "
             f"{r['machine']['loadavg_at_start'][0]:.1f} at the start, {r['machine']['nproc']} CPUs.",
             "", "| job | cold s | warm s | warm ticks/s | cold vs batch | warm vs batch |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for job in INDICATOR_JOBS:
        sec, speed = s["seconds"][job], s["speed_vs_pyspark_batch"][job]
        lines.append(f"| {job} | {seconds(sec['cold'])} | {seconds(sec['warm'])} | "
                     f"{rate(s['warm_ticks_per_second'][job])} | {ratio(speed['cold'])} | {ratio(speed['warm'])} |")
    lines += ["", "Clocks: " + "; ".join(f"{job}: {s['clock'][job]}" for job in INDICATOR_JOBS) + "."]
    return "\n".join(lines) + "\n"


def engines(name: str) -> str:
    r = load(name)
    fams = r["families"]
    loads = [f["headwater"]["loadavg_1m_before"] for f in fams.values()]
    lines = [f"Run of {when(r['created'])} (`results/{name}`): {len(fams)} families, {r['machine']['nproc']} CPUs, "
             f"load {min(loads):.1f}–{max(loads):.1f}; every output checked equal to the baseline's and pandas'.",
             "", "| family | headwater rows/s | baseline rows/s | ratio | target | load | met |",
             "| --- | ---: | ---: | ---: | --- | ---: | --- |"]
    for fam, f in fams.items():
        bases = f["rows_per_s"]["baselines"]
        target = f["target_rows_per_s"]
        lines.append(f"| {fam}{' (' + ' / '.join(bases) + ')' if len(bases) > 1 else ''} | "
                     f"{rate(f['rows_per_s']['headwater'])} | {' / '.join(rate(v) for v in bases.values())} | "
                     f"{' / '.join(ratio(v) for v in f['ratio'].values())} | "
                     f"{f'≥ {target / 1e6:g} M rows/s' if target else ''} | {f['headwater']['loadavg_1m_before']:.1f} | "
                     f"{'yes' if all(f['met'].values()) else 'no'} |")
    lines += ["", "Clocks: " + "; ".join(f"{job}: {text}" for job, text in r["clock"].items()) + "."]
    return "\n".join(lines) + "\n"


def chaos(names: str) -> str:
    """``benchmarks/chaos.py``: recovery times by kind of kill, one table per stored run."""
    parts = []
    for name in names.split():
        r = load(name)
        groups: dict[str, list[float]] = {}
        for why, s in r["recoveries"]:
            groups.setdefault(why if "master" in why else "a worker (submit, append, processing, after a commit)",
                              []).append(s)
        lines = [f"`results/{name}` ({when(r['created'])}): {r['rounds']} rounds, seed {r['seed']}, {r['ticks']:,} "
                 f"ticks in {r['appends']} appends; recovery = from the kill until the graph runs again (wall time in "
                 "the test process).", "", "| kill | count | recovery median | max |", "|---|---:|---:|---:|"]
        for why, values in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"| {why} | {len(values)} | {statistics.median(values):.1f} s | {max(values):.1f} s |")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def tasks(name: str) -> str:
    """``tasks-4-vs-8.txt``: lines ``RESULT <tasks> <rows/s> <split> <load>``, alternating task counts."""
    runs: dict[int, list[float]] = {}
    for line in (RESULTS / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("RESULT "):
            _, n, speed, _rest = line.split(" ", 3)
            runs.setdefault(int(n), []).append(float(speed))
    lines = [f"`results/{name}`, rows/s end to end:", "", "| tasks | runs (M rows/s) | median |", "|---:|---|---:|"]
    for n, values in sorted(runs.items()):
        lines.append(f"| {n} | {', '.join(f'{v / 1e6:.2f}' for v in values)} | {rate(statistics.median(values))} |")
    (a, low), (b, high) = sorted(runs.items())
    pairs = [h / lo for lo, h in zip(low, high, strict=True)]
    lines += ["", f"{b} tasks / {a} tasks: {ratio(statistics.median(high) / statistics.median(low))} (medians), "
              f"{ratio(statistics.median(pairs))} (median of the pair ratios, {min(pairs):.2f}–{max(pairs):.2f})."]
    return "\n".join(lines) + "\n"


def state(names: str) -> str:
    """``state.json [before.json]``: per-append latency by state size, and the same run of an earlier version."""
    now_name, *before_name = names.split()
    now = load(now_name)
    before = {s["keys"]: s for s in load(before_name[0])["sizes"]} if before_name else {}
    lines = [f"Run of {when(now['created'])} (`results/{now_name}`): appends of {now['append_rows']:,} rows over "
             f"{now['touched_keys']} keys, {now['appends']} per size; latency = append call → its rows visible in the "
             "sink" + (f"; before: `results/{before_name[0]}`, whole snapshots" if before else "") + ".", "",
             "| keys of state | p50 | p90 | max | p50 / smallest |" + (" before: p50 | before: p50 / smallest |"
                                                                        if before else "") +
             " state on disk | driver memory |",
             "| ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if before else "") + " ---: | ---: |"]
    for s in now["sizes"]:
        b = before.get(s["keys"])
        was = f" {b['p50_ms']:,.0f} ms | {ratio(b['p50_over_smallest'])} |" if b else (" — | — |" if before else "")
        lines.append(f"| {s['keys']:,} | {s['p50_ms']:,.0f} ms | {s['p90_ms']:,.0f} ms | {s['max_ms']:,.0f} ms | "
                     f"{ratio(s['p50_over_smallest'])} |{was} {s['disk_bytes_per_key']:.0f} B/key | "
                     f"{s['driver_rss_bytes_per_key']:.0f} B/key |")
    r = now["restart"]
    lines += ["", f"Restart with {r['keys']:,} keys of state, in a new process: connect → graph running "
              f"{r['connect_to_running_s']:.1f} s, its first append {r['first_append_after_restart_ms']:,.0f} ms "
              "(it reads the state from disk)."]
    return "\n".join(lines) + "\n"


def summary(names: str) -> str:
    """The README's paragraph: the headline of the indicator, reactive and engine-family runs."""
    ind_name, rea_name, eng_name = names.split()
    ind, rea, eng = load(ind_name)["summary"], load(rea_name), load(eng_name)
    ind_created, eng_created = load(ind_name)["created"], load(eng_name)["created"]
    ratios = [v for f in eng["families"].values() for v in f["ratio"].values()]
    return (f"Latest stored runs on the shared 2-CPU machine (`benchmarks/results/`; wall time from a job's first "
            f"input to its last result, start-up before it): warm ticks → indicators at **{ratio(ind['speed_vs_pyspark_batch']['headwater']['warm'])}** "
            f"the hand-written PySpark batch job and **{ratio(ind['headwater_warm_speed_vs_pyspark_streaming_warm'])}** a "
            f"hand-written Structured Streaming pipeline ({ind_created[:10]}, `{ind_name}`); the reactive engine "
            f"({rea['keys']:,} keys × {rea['metrics']} metrics, `parallelize(key, {rea['tasks']})`) at "
            f"**{rate(rea['rows_per_s']['headwater_spark'])} input rows/s** end to end on Spark, its kernels "
            f"{rate(rea['rows_per_s']['kernels_alone'])} rows/s in one process ({rea['created'][:10]}, `{rea_name}`); "
            f"every engine family **{ratio(min(ratios))}–{ratio(max(ratios))}** as fast as the same job hand-written "
            f"in PySpark ({eng_created[:10]}, `{eng_name}`).\n")


def first_batch(names: str) -> str:
    """``bench_first_batch.py`` runs, one row each (e.g. before and after a change)."""
    lines = ["| run | sources | setup kernel step s (cold / warm) | first batch s (cold / warm) | cold ÷ warm | "
             "demo ticks/s (first / second run) | second ÷ first | demo kernel task-s (first / second) | "
             "demo: graph running after s (first / second) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    clock: dict[str, str] = {}
    for name in names.split():
        r = load(name)
        s, b, d = r["setup_warm_up_s"], r["first_batch"], r["demo"]
        lines.append(f"| {when(r['created'])} (`results/{name}`) | {r['sources']} | {s['cold']:.1f} / {s['warm']:.1f} | "
                     f"{b['cold_s']:.2f} / {b['warm_s']:.2f} | {ratio(b['cold_over_warm'])} | "
                     f"{d['runs'][0]['ticks_per_s']:,.0f} / {d['runs'][1]['ticks_per_s']:,.0f} | "
                     f"{ratio(d['second_over_first'])} | {d['runs'][0]['kernel_task_seconds']:.2f} / "
                     f"{d['runs'][1]['kernel_task_seconds']:.2f} | {_running_after(d['runs'])} |")
        clock = r["clock"]
    lines += ["", "Clocks: " + "; ".join(f"{k}: {v}" for k, v in clock.items()) + "."]
    return "\n".join(lines) + "\n"


def _running_after(demos: list[dict]) -> str:
    """What each demo run printed as "graph running after" (runs stored before it was recorded: —)."""
    seconds = [d.get("running_after_s") for d in demos]
    return " / ".join("—" if x is None else f"{x:.1f}" for x in seconds)


def cold_start(names: str) -> str:
    """``bench_cold_start.py``: medians of the two drivers it compared (the class archive, or the zygote, and
    without), per stored run (the last one's phases), and an embedded restart's where the run measured one."""
    runs = [(name, load(name)) for name in names.split()]
    lines = ["| run | driver | connect() | → graph running | second submit (warm) | restart → running | "
             "first micro-batch after the restart (warm) |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    archive_runs = [["archive", "with the class archive"], ["no_archive", "without (baseline)"]]  # before "variants"
    for name, r in runs:
        for variant, label in r.get("variants", archive_runs):
            m = r["median_seconds"][variant]
            restart = (f"{m['restart_running']:.1f} s | {m['first_batch_after_restart']:.2f} s "
                       f"({m['warm_batch']:.2f} s)" if "restart_running" in m else "— | —")
            lines.append(f"| {when(r['created'])} (`results/{name}`) | {label} | {m['connect']:.1f} s | "
                         f"{m['running']:.1f} s | {m['second_submit']:.2f} s | {restart} |")
    name, r = runs[-1]
    (tried, label), (baseline, _) = r.get("variants", archive_runs)
    phases = [run["phases"] for run in r["runs"][tried]]
    mid = {k: statistics.median(p[k] for p in phases) for k in phases[0]}
    running = r["median_seconds"][tried]["running"] / r["median_seconds"][baseline]["running"]
    lines += ["", f"`results/{name}`: {r['rounds']} rounds each, alternating; clock: {r['clock']}. connect() → "
              f"running {label}: {ratio(running)} of without. Phases {label} (median, from the process's start): "
              f"Spark session built {mid['spark_session']:.1f} s, Python workers forked {mid['python_workers']:.1f} s, "
              f"both queries past their first trigger {mid['queries_running']:.1f} s."]
    return "\n".join(lines) + "\n"


def failover(names: str) -> str:
    """``bench_failover.py``: a worker's kill -9 → running elsewhere, and the first micro-batch there, per run."""
    runs = [(name, load(name)) for name in names.split()]
    lines = ["| run | kill -9 → running on the other worker (median) | first micro-batch after the move | warm "
             "micro-batch | first ÷ warm | each round: recovery, first batch |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for name, r in runs:
        m = r["median"]
        each = "; ".join(f"{x['recovery_s']:.1f} s, {x['first_batch_after_move_s'] * 1000:.0f} ms" for x in r["rounds"])
        lines.append(f"| {when(r['created'])} (`results/{name}`) | {m['recovery_s']:.1f} s | "
                     f"{m['first_batch_after_move_s'] * 1000:.0f} ms | {m['warm_batch_s'] * 1000:.0f} ms | "
                     f"{ratio(m['first_vs_warm'])} | {each} |")
    for name, r in runs:
        if "master" in r:
            m = r["master"]
            warm = statistics.median(m["warm_batch_s"])
            lines += ["", f"The active master's `kill -9` (`results/{name}`): the graph running under the standby, as "
                      f"the client sees it, {m['recovery_s']:.1f} s after the kill; the first micro-batch "
                      f"{m['first_batch_after_takeover_s'] * 1000:.0f} ms (warm before: {warm * 1000:.0f} ms)."]
    lines += ["", f"Clock: {runs[-1][1]['clock']}."]
    return "\n".join(lines) + "\n"


def latency(names: str) -> str:
    """``bench_latency.py``: append → visible in the sink against append → visible in the source, per run."""
    runs = [(name, load(name)) for name in names.split()]
    lines = ["| run | source p50 / p90 / p99 (baseline) | sink p50 / p90 / p99 | sink ÷ source p50 | "
             "micro-batch (subgraph 0 / 1, median) | second submit |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in runs:
        src, sink, phases = r["source_visible_ms"], r["sink_visible_ms"], r.get("median_batch_phases_ms", {})
        batch = " / ".join(f"{phases.get(f'subgraph_{i}.triggerExecution', float('nan')):.0f} ms" for i in (0, 1))
        lines.append(f"| {when(r['created'])} (`results/{name}`) | {src['p50']:.0f} / {src['p90']:.0f} / "
                     f"{src['p99']:.0f} ms | {sink['p50']:.0f} / {sink['p90']:.0f} / {sink['p99']:.0f} ms | "
                     f"{ratio(r['sink_over_source_p50'])} | {batch} | {r['submit_to_running_warm_s']:.2f} s |")
    first = runs[0][1]
    lines += ["", f"{first['rate_rows_s']:,} rows/s in {first['appends_per_s']:g} appends/s, trigger {first['trigger']}; "
              f"clock: {first['clock']}."]
    return "\n".join(lines) + "\n"


def hosts(name: str) -> str:
    """``bench_hosts.py``: a graph's executors on two namespace hosts against one, per round and median."""
    r = load(name)
    lines = [f"Run of {when(r['created'])} (`results/{name}`), {r['rows']:,} rows in appends of {r['batch']:,}, "
             f"{r['rounds']} rounds alternating; clock: {r['clock']}.", "",
             "| executors | rows/s (median) | each round | executor hosts |", "| --- | ---: | ---: | --- |"]
    for layout, runs in r["runs"].items():
        lines.append(f"| on {layout} | {rate(r['median_rows_per_s'][layout])} | "
                     f"{' / '.join(rate(x['rows_per_s']) for x in runs)} | {', '.join(runs[0]['executor_hosts'])} |")
    lines += ["", f"Two hosts ÷ one host: {ratio(r['two_over_one'])}."]
    return "\n".join(lines) + "\n"


RENDER: dict[str, Callable[[str], str]] = {"reactive": reactive, "indicators": indicators, "engines": engines,
                                           "chaos": chaos, "tasks": tasks, "summary": summary,
                                           "state": state, "first-batch": first_batch, "cold-start": cold_start,
                                           "latency": latency, "hosts": hosts, "failover": failover}


def blocks(text: str) -> list[re.Match[str]]:
    return list(BLOCK.finditer(text))


def rendered(match: re.Match[str]) -> str:
    kind = match["kind"]
    if kind not in RENDER:
        raise ValueError(f"figures block {kind!r}: unknown kind; expected one of {sorted(RENDER)}")
    return RENDER[kind](match["files"])


def rewrite(text: str) -> str:
    return BLOCK.sub(lambda m: f"<!-- figures:{m['kind']} {m['files']} -->\n{rendered(m)}<!-- /figures -->", text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--check", action="store_true", help="report the blocks that differ; change nothing")
    args = ap.parse_args(argv)
    stale = []
    for doc in DOCS:
        path = ROOT / doc
        text = path.read_text(encoding="utf-8")
        new = rewrite(text)
        if new != text:
            stale.append(doc)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    print(("differs from the stored results: " if args.check else "rewrote: ") + ", ".join(stale) if stale
          else "every quoted figure is the stored results'")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
