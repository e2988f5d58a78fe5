#!/usr/bin/env python3
"""Turns criterion's estimates of `cargo bench -p flow-benches --bench shapes` into the tables of
docs/performance.md, with flow's ratio to every competitor and the budget verdicts.

    python3 benches/report.py [target/criterion]

Reads `<dir>/<group>/<bench>/new/estimates.json` (the median's point estimate, in ns).
"""

import json
import pathlib
import sys

NODES = {"chain": 1000, "fan": 1000, "layered": 1000, "mixed": 50, "race2": 2, "quorum_2of3": 3}
LABELS = {
    "flow_run": "flow `run`",
    "flow_log": "flow `runner().execute` (event log)",
    "hand_await": "hand-written: sequential awaits",
    "hand_join_all": "hand-written: `join_all`",
    "hand_unordered": "hand-written: `FuturesUnordered`",
    "hand_try_join": "hand-written: `try_join!`",
    "hand_select": "hand-written: `tokio::select!`",
    "dagrs": "dagrs 0.9.0",
    "run": "`run` (no observer, no log)",
    "runner_no_log": "`runner().record(false)` (no observer)",
    "noop_observer": "an observer that does nothing",
    "recorder": "`Recorder` observer",
    "event_log": "event log (`runner().execute`)",
}
ORDER = list(LABELS)


def median_ns(path: pathlib.Path):
    try:
        data = json.loads((path / "new" / "estimates.json").read_text())
    except FileNotFoundError:
        return None
    return data["median"]["point_estimate"]


def group(root: pathlib.Path, name: str) -> dict:
    directory = root / name
    if not directory.is_dir():
        return {}
    found = {}
    for bench in directory.iterdir():
        value = median_ns(bench)
        if value is not None:
            found[bench.name] = value
    return dict(sorted(found.items(), key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER else 99))


def fmt_time(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e3:.1f} µs"


def shape_table(root, name, nodes, reference="flow_run"):
    results = group(root, name)
    if not results:
        return None, {}
    flow = results.get(reference)
    lines = [
        f"**{name}** ({nodes} nodes)",
        "",
        "| code | median per graph | per node | flow `run` ÷ this |",
        "|---|---:|---:|---:|",
    ]
    for bench, ns in results.items():
        ratio = f"{flow / ns:.2f}x" if flow else ""
        lines.append(f"| {LABELS.get(bench, bench)} | {fmt_time(ns)} | {ns / nodes:.1f} ns | {ratio} |")
    return "\n".join(lines), results


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")
    verdicts = []
    for prefix in ("", "mt_"):
        for variant in ("imm", "yield"):
            for shape in ("chain", "fan", "layered", "mixed"):
                name = f"{prefix}{shape}_{variant}"
                table, results = shape_table(root, name, NODES[shape])
                if table is None:
                    continue
                print(table + "\n")
                if prefix or "flow_run" not in results:
                    continue
                flow = results["flow_run"]
                hands = {k: v for k, v in results.items() if k.startswith("hand_")}
                if hands and shape != "mixed":
                    best_name, best = min(hands.items(), key=lambda kv: kv[1])
                    ratio = flow / best
                    if variant == "yield":
                        limit = 1.5
                    elif shape != "chain":
                        limit = 3.0
                    else:
                        limit = None
                    verdict = (
                        "report only" if limit is None else ("met" if ratio <= limit else "MISSED")
                    )
                    bound = f"≤ {limit}x" if limit else "—"
                    verdicts.append(
                        f"| {shape} | {variant} | flow ÷ best hand-written "
                        f"({LABELS[best_name].split(': ')[-1]}) | {ratio:.2f}x | {bound} | {verdict} |"
                    )
                if "dagrs" in results:
                    speedup = results["dagrs"] / flow
                    verdicts.append(
                        f"| {shape} | {variant} | dagrs ÷ flow | {speedup:.1f}x | ≥ 10x | "
                        f"{'met' if speedup >= 10 else 'MISSED'} |"
                    )
    for name, nodes in (("fan_gated", NODES["fan"]), ("race2", NODES["race2"]), ("quorum_2of3", NODES["quorum_2of3"])):
        table, _ = shape_table(root, name, nodes)
        if table is not None:
            print(table + "\n")
    for shape in ("chain", "fan", "layered", "mixed"):
        table, _ = shape_table(root, f"observer_{shape}", NODES[shape], reference="run")
        if table is not None:
            print(table.replace("flow `run` ÷ this", "`run` ÷ this") + "\n")
    if verdicts:
        print("| shape | operation | budget | measured | bound | verdict |")
        print("|---|---|---|---:|---|---|")
        print("\n".join(verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
