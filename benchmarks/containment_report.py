"""Write docs/results/h200_containment/README.md from the raw files beside it (never by hand).

The raw files are what benchmarks/gpu_containment.sh left under $OUT in one device call:
bench_{base,new}_{round}.log (benchmarks/verifier_bench.py's JSON rows, the build before this one
from .base/ and this one, alternating), verdict_*.json (`kernelloop verify --json`, with the box
its job had), doctor.txt, gpu_tests.log. A second folder of the same kind may hold another call.

    python benchmarks/containment_report.py docs/results/h200_containment
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

CALLS = {  # folder -> what that call ran (its build), in the report's words
    "call4": "the per-job box (this build, before the text and hostile-dir fixes were merged) against the "
             "build before it (9f7a8de), alternating base/new twice",
    "call3_memo": "the unmemoisable-timing branch merged in (later reverted) against 9f7a8de, one round each",
}


def bench_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith('{"problem"')]


def warm(values: list[float]) -> list[float]:
    """The first verification builds the baselines: fixed cost is read from the warm ones."""
    return values[1:] or values


def bench_table(folder: Path) -> list[str]:
    runs = sorted(folder.glob("bench_*.log"), key=lambda p: (p.stem.split("_")[-1], p.stem))
    lines = ["| run | problem | fixed s (warm, median) | speedup over eager (median) |", "|---|---|---|---|"]
    totals: dict[str, list[float]] = {}
    for run in runs:
        build = run.stem.split("_")[1]
        for row in bench_rows(run):
            fixed = warm(row["fixed_s"])
            totals.setdefault(build, []).extend(fixed)
            lines.append(f"| {run.stem.removeprefix('bench_')} | {row['problem']} | {statistics.median(fixed):.3f} | "
                         f"{statistics.median(row['speedups']):.3f} |")
    lines.append("")
    for build, values in totals.items():
        lines.append(f"- {build}: fixed cost per candidate, median of {len(values)} warm verifications: "
                     f"{statistics.median(values):.3f} s (max {max(values):.3f} s)")
    return lines


def verdicts(folder: Path) -> list[str]:
    lines = []
    for path in sorted(folder.glob("verdict_*.json")):
        verdict = json.loads(path.read_text().strip().splitlines()[-1])
        box = verdict.get("containment") or {}
        lines.append(f"- `{path.stem.removeprefix('verdict_')}`: {verdict['status']}, speedup "
                     f"{verdict.get('speedup') or 0:.2f}x; isolated {box.get('isolated')}, uid {box.get('host_uid')} on "
                     f"the host, capabilities {box.get('capabilities')}, seccomp {box.get('seccomp')}, no_new_privs "
                     f"{box.get('no_new_privs')}, own namespaces {', '.join(box.get('own_namespaces', []))}, "
                     f"threads that kept capabilities {box.get('threads_with_capabilities')}")
    return lines


def test_summary(folder: Path) -> str:
    log = folder / "gpu_tests.log"
    if not log.is_file():
        return "no tests in this call"
    found = re.findall(r"^=*\s*(\d+ (?:passed|failed).*?) in [\d.]+s", log.read_text(), flags=re.M)
    return found[-1] if found else "no summary line"


def report(root: Path) -> str:
    """The README's text, from the raw files under `root`."""
    out = ["# The per-job box on an H200, measured", "",
           "Written by `benchmarks/containment_report.py` from the raw files in the folders beside it "
           "(`benchmarks/gpu_containment.sh`, one device call each, on one NVIDIA H200 node as root, "
           "bubblewrap from Debian's package). Compare numbers within a call only.", ""]
    for name, words in CALLS.items():
        folder = root / name
        if not folder.is_dir():
            continue
        out += [f"## {name}: {words}", ""]
        out += verdicts(folder) + [""] if list(folder.glob("verdict_*.json")) else []
        if (folder / "doctor.txt").is_file():
            doctor = " ".join(" ".join((folder / "doctor.txt").read_text().split()).split())
            out += [f"`kernelloop doctor` on the node: {doctor}", ""]
        out += bench_table(folder) + ["", f"GPU tests in this call: {test_summary(folder)}", ""]
    return "\n".join(out)


def main(root: Path) -> None:
    (root / "README.md").write_text(report(root))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results/h200_containment"))
