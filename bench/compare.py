"""culex against its Python peers, side by side, on one private server: one table.

    python bench/compare.py                  # everything, medians of 2 runs
    python bench/compare.py --quick          # 2k tasks, 1 run, a 100k backlog
    python bench/compare.py --only culex,rq --runs 3
    python bench/compare.py --pin bench/results/FILE.json   # the peers of that run
    PYTHONPATH=/tmp/cmp/src python bench/compare.py --commit SHA  # culex from git archive SHA

Run it with the interpreter that has culex (the checkout under test) installed. The peers
are installed on first use into their own environments under bench/.peers/. The table
goes to stdout (Markdown); the run's record (raw results, medians, the machine, the culex
commit, every environment's versions and pip freeze) to bench/results/<time>-<commit>.json.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import extras
import peers
import redis
import report
import scenarios
from child import HERE
from scenarios import Sizes, System
from server import arguments, private_server

SYSTEMS = ["culex", *peers.PEERS]
RESULTS = HERE / "results"


def parse() -> argparse.Namespace:
    parser = arguments(__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller counts, 1 run by default")
    parser.add_argument("--runs", type=int, help="runs to take the median of (default 2)")
    parser.add_argument("--only", help=f"comma-separated, among: {','.join(SYSTEMS)}")
    parser.add_argument("--no-extras", action="store_true", help="skip culex's E and limit part")
    parser.add_argument("--upgrade", action="store_true", help="upgrade the peers first")
    parser.add_argument(
        "--pin", type=Path, help="install the peers as this results file recorded them"
    )
    parser.add_argument(
        "--commit",
        help="the commit a culex that is no git checkout was taken from (git archive), "
        "for the record and its name",
    )
    args = parser.parse_args()
    args.systems = args.only.split(",") if args.only else SYSTEMS
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems: {', '.join(sorted(unknown))}")
    if args.runs is None:
        args.runs = 1 if args.quick else 2
    if args.pin and args.upgrade:
        parser.error("--pin and --upgrade contradict each other")
    return args


def checkout(archived: str | None = None) -> dict[str, Any]:
    """The commit of the culex under test, and whether the work tree has changes on top;
    for a culex that is no git checkout (an archive of a commit on PYTHONPATH, so that the
    checkout can be edited while the comparison runs), ``archived``, the commit it was taken
    from, when given."""
    import culex

    folder = Path(culex.__file__).resolve().parent
    git = ["git", "-C", str(folder)]
    try:
        head = subprocess.run(
            [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", "."], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        if archived:
            return {"culex_checkout": f"{archived[:7]} (an archive of it, at {folder})",
                    "culex_commit": archived}  # fmt: skip
        return {"culex_checkout": f"not a git checkout ({folder})", "culex_commit": None}
    text = head[:7] + (" with uncommitted changes" if dirty else "")
    return {"culex_checkout": text, "culex_commit": head, "culex_uncommitted": bool(dirty)}


def source_digest() -> str:
    """A digest of culex's source files: others may edit the checkout during a run."""
    import culex

    folder = Path(culex.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.suffix in (".py", ".lua"):
            digest.update(path.relative_to(folder).as_posix().encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def machine(archived: str | None = None) -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": os.getloadavg(),
        **checkout(archived),
        "culex_source_at_start": source_digest(),
    }


def environments(
    systems: list[str], upgrade: bool, pin: Path | None
) -> tuple[dict[str, str], dict[str, Any], dict[str, list[str]]]:
    """Each system's interpreter, the versions installed next to it, and its pip freeze."""
    pinned = json.loads(pin.read_text()) if pin else None
    pythons: dict[str, str] = {}
    versions: dict[str, Any] = {}
    for name in systems:
        if name == "culex":
            pythons[name] = sys.executable
            wanted = peers.CULEX_REPORTED
        else:
            pins = peers.pinned(name, pinned) if pinned else None
            peers.ensure(name, upgrade=upgrade, pins=pins)
            pythons[name] = str(peers.python(name))
            wanted = [peers.distribution(d) for d in peers.PEERS[name] + peers.SHARED]
        versions[name] = peers.versions(pythons[name], wanted)
    frozen = {name: peers.freeze(python) for name, python in pythons.items()}
    return pythons, versions, frozen


def run_all(
    args: argparse.Namespace, systems: list[System], client: redis.Redis, sizes: Sizes
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every system, then culex's extras, ``args.runs`` times: the raw results per run."""
    runs: list[dict[str, Any]] = []
    extra_runs: list[dict[str, Any]] = []
    for run in range(args.runs):
        results: dict[str, Any] = {}
        for system in systems:
            print(f"run {run + 1}/{args.runs}: {system.name}", flush=True)
            results[system.name] = scenarios.measure(system, client, sizes)
        runs.append(results)
        if "culex" in args.systems and not args.no_extras:
            print(f"run {run + 1}/{args.runs}: culex extras (E, limit)", flush=True)
            culex = next(s for s in systems if s.name == "culex")
            extra_runs.append(extras.measure(culex, client, sizes))
    return runs, extra_runs


def main() -> None:
    args = parse()
    sizes = Sizes(2_000, 200, 300, (1_000, 100_000)) if args.quick else Sizes()
    started = time.strftime("%Y%m%d-%H%M%S")
    logs = RESULTS / f"logs-{started}"
    info = machine(args.commit)
    if info["load_average_at_start"][0] > 0.5:
        print(f"note: the machine is busy (load {info['load_average_at_start'][0]:.2f})")
    pythons, versions, frozen = environments(args.systems, args.upgrade, args.pin)
    with private_server(args.server) as server:
        info["server"] = server.version()
        print(f"server: {info['server']} at {server.url}", flush=True)
        client = redis.Redis.from_url(server.url)
        try:
            systems = [System(name, pythons[name], server.url, logs) for name in args.systems]
            runs, extra_runs = run_all(args, systems, client, sizes)
        finally:
            client.close()
    info["load_average_at_end"] = os.getloadavg()
    info["runs"] = len(runs)
    info["culex_source_at_end"] = source_digest()
    if info["culex_source_at_end"] != info["culex_source_at_start"]:
        info["culex_checkout"] += ", CHANGED during the run"
    settings = {s.name: s.settings for s in systems}
    medians = {name: report.median_tree([r.get(name) for r in runs]) for name in args.systems}
    extra = report.median_tree(extra_runs)
    text = report.render(info, sizes, medians, extra, settings, versions)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{started}-{(info['culex_commit'] or 'unknown')[:7]}.json"
    record = {
        "command": sys.argv,
        "machine": info,
        "versions": versions,
        "pip": frozen,
        "settings": settings,
        "sizes": sizes.__dict__,
        "runs": runs,
        "extra_runs": extra_runs,
        "medians": medians,
        "extra_medians": extra,
        "table": text,
    }
    out.write_text(json.dumps(record, indent=1, default=list))
    print()
    print(text)
    print(f"\nthe run's record: {out}; worker logs: {logs}")


if __name__ == "__main__":
    main()
