"""Medians over runs, and the table: every system, every scenario, culex against the best."""

from __future__ import annotations

import statistics
from typing import Any

import peers

# (column, path into a system's results, unit, True when higher is better)
COLUMNS = [
    ("A enqueue, 1 call/task", ("A", "rate"), "/s", True),
    ("A2 bulk enqueue", ("A2", "rate"), "/s", True),
    ("B drain, 1 process", ("B", "rate"), "/s", True),
    ("C pick-up p50", ("C", "p50_ms"), "ms", False),
    ("C p99", ("C", "p99_ms"), "ms", False),
    ("D lateness p50", ("D", "p50_ms"), "ms", False),
    ("D p99", ("D", "p99_ms"), "ms", False),
    ("RSS in B", ("B", "rss_mb"), "MB", False),
    ("RSS in B, stdlib task body", ("B-stdlib", "rss_mb"), "MB", False),
    ("server CPU in B", ("B", "server_cpu_us_per_task"), "µs/task", False),
]


def dig(tree: Any, path: tuple[str, ...]) -> Any:
    for step in path:
        if not isinstance(tree, dict) or step not in tree:
            return None
        tree = tree[step]
    return tree


def median_tree(runs: list[Any]) -> Any:
    """The same shape as one run, each number the median of the runs that have it."""
    present = [r for r in runs if r is not None]
    if not present:
        return None
    if all(isinstance(r, dict) for r in present):
        keys = dict.fromkeys(k for r in present for k in r)
        return {k: median_tree([r.get(k) for r in present]) for k in keys}
    numbers = [r for r in present if isinstance(r, int | float) and not isinstance(r, bool)]
    if len(numbers) == len(present):
        return statistics.median(numbers)
    return present[0]  # text: n/a reasons, notes, errors


def number(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell(system: dict[str, Any], path: tuple[str, ...], unit: str) -> str:
    value = dig(system, path)
    if isinstance(value, int | float):
        return number(value)
    scenario = system.get(path[0]) or {}
    if "na" in scenario:
        return "n/a"
    if "error" in scenario:
        return "error"
    return "-"


def best_peer(medians: dict[str, Any], path: tuple[str, ...], higher: bool) -> tuple[str, float]:
    scored = [
        (name, value)
        for name, results in medians.items()
        if name != "culex" and isinstance(value := dig(results, path), int | float)
    ]
    if not scored:
        return "", float("nan")
    if higher:
        return max(scored, key=lambda item: item[1])
    # Closest to zero: a task that starts before it is due is not "less late".
    return min(scored, key=lambda item: abs(item[1]))


def table(medians: dict[str, Any], versions: dict[str, str]) -> str:
    """A Markdown table; rows are systems, then the best peer and culex's ratio to it."""
    header = ["system", *(f"{title} ({unit})" for title, _, unit, _ in COLUMNS)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, results in medians.items():
        row = [f"{name} {versions.get(name, '')}".strip()]
        row += [cell(results, path, unit) for _, path, unit, _ in COLUMNS]
        lines.append("| " + " | ".join(row) + " |")
    if "culex" in medians and len(medians) > 1:
        best_row, ratio_row = ["best peer"], ["culex ÷ best peer"]
        for _, path, _, higher in COLUMNS:
            name, value = best_peer(medians, path, higher)
            ours = dig(medians["culex"], path)
            best_row.append(f"{number(value)} {name}" if name else "-")
            if name and isinstance(ours, int | float) and value:
                ratio_row.append(f"{abs(ours / value):.2f}x")
            else:
                ratio_row.append("-")
        lines.append("| " + " | ".join(best_row) + " |")
        lines.append("| " + " | ".join(ratio_row) + " |")
    return "\n".join(lines)


def notes(medians: dict[str, Any]) -> list[str]:
    """Why a cell says n/a or error, and notes the producers left."""
    found = []
    for name, results in medians.items():
        for scenario, value in results.items():
            if not isinstance(value, dict):
                continue
            for kind in ("na", "error", "note"):
                if value.get(kind):
                    found.append(f"{name} {scenario}: {kind}: {value[kind]}")
            if value.get("early"):
                found.append(
                    f"{name} {scenario}: {value['early']:.0f} of {value['count']:.0f} tasks "
                    "started more than 1 ms before they were due (negative lateness)"
                )
    return found


def extras(extra: dict[str, Any], culex: dict[str, Any], n: int) -> list[str]:
    """The culex-only section, as lines of text (``n``: the tasks of A, A2 and B)."""

    def get(*path: str) -> str:
        value = dig(extra, path)
        return number(value) if isinstance(value, int | float) else "-"

    b = dig(culex, ("B", "rate"))
    b_steady = dig(culex, ("B", "rate_after_first"))
    lines = [
        f"- A via `aenqueue()`: {get('A_async', 'rate')}/s (sync `enqueue()`: "
        f"{number(dig(culex, ('A', 'rate')) or 0)}/s)",
        f"- B with the per-task INFO lines off (`--log-level WARNING`): "
        f"{get('B_quiet', 'rate')}/s (with them, the default: {number(b or 0)}/s)",
        f"- B with 2 runner processes: {get('B_2', 'rate')}/s; with 4: {get('B_4', 'rate')}/s",
    ]
    for key in sorted(k for k in extra if k.startswith("backlog_")):
        depth = int(key.removeprefix("backlog_"))
        lines.append(
            f"- {depth:,} tasks waiting: bulk enqueue of {n:,} more "
            f"{get(key, 'bulk_enqueue', 'rate')}/s; a runner drains {n:,} of them at "
            f"{get(key, 'drain', 'rate_after_first')}/s after its start-up; the scripts "
            f"cycling enqueue + claim + complete {get(key, 'cycle', 'rate')}/s "
            f"({get(key, 'cycle', 'server_cpu_us_per_task')} µs of server CPU per task)"
        )
        lines.append(
            f"  - memory per waiting task: {get(key, 'fill', 'used_memory_per_task')} bytes "
            f"(INFO used_memory delta); MEMORY USAGE: task hash "
            f"{get(key, 'fill', 'task_hash_bytes')} + waiting ZSET share "
            f"{get(key, 'fill', 'waiting_zset_bytes_per_task')} bytes"
        )
    loop = dig(extra, ("limit", "rate"))
    ceiling = dig(extra, ("limit", "server_limit"))
    lines.append(
        f"- the limit: culex's claim + complete scripts in a tight loop (batches of 100): "
        f"{get('limit', 'rate')}/s, {get('limit', 'server_cpu_us_per_task')} µs of server CPU "
        f"per task, so one server core tops out near {get('limit', 'server_limit')}/s"
    )
    if isinstance(b, int | float) and loop and ceiling:
        lines.append(
            f"  - culex's B drain is {b / loop:.0%} of the loop and {b / ceiling:.0%} of the "
            f"server's ceiling (after start-up: {(b_steady or 0) / loop:.0%} and "
            f"{(b_steady or 0) / ceiling:.0%})"
        )
    return lines


def render(
    info: dict[str, Any],
    sizes: Any,
    medians: dict[str, Any],
    extra: dict[str, Any] | None,
    settings: dict[str, str],
    versions: dict[str, dict[str, str]],
) -> str:
    """The whole report: a line on the run, the table, the settings, notes and E."""
    shown = {
        name: found.get(peers.distribution((peers.PEERS.get(name) or [name])[0]), "")
        for name, found in versions.items()
    }
    lines = [
        f"medians of {info['runs']} run(s); "
        f"{sizes.enqueue:,} tasks in A, A2 and B; {sizes.trickle} in C; {sizes.delayed} in D; "
        f"server {info['server']}; {info['cores']} cores ({info['cpu']}); load average at "
        f"start {info['load_average_at_start'][0]:.2f}, at end "
        f"{info['load_average_at_end'][0]:.2f}; culex at {info['culex_checkout']}",
        "",
        table(medians, shown),
        "",
        "Ratios: above 1 is better for rates (/s), below 1 is better for times and memory.",
        "",
        *(f"- {name}: {text}" for name, text in settings.items()),
        *(f"- {text}" for text in notes(medians)),
    ]
    if extra and "culex" in medians:
        lines += [
            "",
            "culex only (E, and the limit):",
            *extras(extra, medians["culex"], sizes.enqueue),
        ]
    return "\n".join(lines)
