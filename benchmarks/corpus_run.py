"""Run corpus fixtures through one verifier and print attack -> verdict -> speed as a table.

  python benchmarks/corpus_run.py [--device cuda] [--unlinted] [--no-time] [--out DIR] [NAME ...]
  python benchmarks/corpus_run.py --report DIR     # DIR/README.md from the corpus_run JSON files in DIR

NAME is a fixture stem from tests/fixtures/cheats or tests/fixtures/honest (default: every fixture
with an `unlinted:` header when --unlinted, else all). The verdicts, speeds and the zygote logs'
last lines (when a sandbox worker died) go to DIR/corpus_run.json.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Code
from kernelloop.tools.verify.verifier import Verifier

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"


def header(path: Path) -> dict[str, str]:
    fields = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        key, _, value = line.lstrip("#").strip().partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def report(folder: Path) -> str:
    """Attack -> verdict -> speed, one table per raw file in `folder`."""
    lines = ["# The adversarial corpus, verdict by verdict", "",
             "Written by `benchmarks/corpus_run.py --report` from the raw files beside it. `unlinted`: the static "
             "rules off, so what stands is the trust boundary alone; the speed column shows where a speedup comes "
             "from (the candidate's events, confirmed, or the parent's clock).", ""]
    for raw in sorted(folder.glob("*.json")):
        rows = json.loads(raw.read_text())
        ok = sum(r["ok"] for r in rows)
        lines += [f"## {raw.stem}: {ok} of {len(rows)} as promised", "",
                  "| fixture | expected | verdict | speedup | reason |", "|---|---|---|---|---|"]
        for r in rows:
            speed = "" if r["speedup"] is None else f"{r['speedup']:.3f}x ({r['speed_source'].split(' (')[0]})"
            reason = r["reason"].replace("|", "/")[:110]
            promised = "" if r["ok"] else " (NOT AS PROMISED)"
            lines.append(f"| {r['fixture']} | {r['expected'].replace('|', '/')} | {r['status']}{promised} "
                         f"| {speed} | {reason} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--report", type=Path, help="write DIR/README.md from the raw files in DIR")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--unlinted", action="store_true", help="static rules off: the trust boundary alone")
    parser.add_argument("--no-time", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/kernelloop-out")))
    parser.add_argument("--compile-timeout-s", type=float, default=60.0)
    parser.add_argument("--run-timeout-s", type=float, default=180.0)
    args = parser.parse_args()
    if args.report:
        (args.report / "README.md").write_text(report(args.report))
        return
    paths = sorted((FIXTURES / "cheats").glob("*.py")) + sorted((FIXTURES / "honest").glob("*.py"))
    if args.names:
        paths = [p for p in paths if p.stem in args.names]
    elif args.unlinted:
        paths = [p for p in paths if "unlinted" in header(p)]
    workspace = args.out / "corpus-workspace"
    rows = []
    with Verifier(device=args.device, workspace=workspace, static_checks=not args.unlinted,
                  time_it=not args.no_time, compile_timeout_s=args.compile_timeout_s,
                  run_timeout_s=args.run_timeout_s) as verifier:
        for path in paths:
            fields = header(path)
            started = time.perf_counter()
            verdict = verifier.verify(Candidate.from_file(path), Problem.from_file(FIXTURES / "problems" / fields["problem"]))
            expected = fields.get("unlinted" if args.unlinted else "expect", "")
            row = {"fixture": path.stem, "status": verdict.status.value, "expected": expected,
                   "ok": verdict.status.value in [s.strip() for s in expected.split("|")],
                   "reason": verdict.reason[:160], "speedup": verdict.speedup, "speed_source": verdict.speed_source,
                   "seconds": round(time.perf_counter() - started, 2), "isolation": verdict.isolation,
                   "warnings": verdict.warnings}
            if verdict.code is Code.worker_died:
                logs = sorted(workspace.glob("verifier/*/zygote.log"))
                row["zygote_logs"] = {str(log.relative_to(workspace)): log.read_text()[-3000:] for log in logs}
            rows.append(row)
            speed = "" if verdict.speedup is None else f"{verdict.speedup:.3f}x ({verdict.speed_source})"
            print(f"{'ok ' if row['ok'] else 'BAD'} {path.stem:42} {verdict.status.value:14} {speed:48} "
                  f"{row['seconds']:6.1f}s  {verdict.reason[:90]}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"corpus_run_{args.device}{'_unlinted' if args.unlinted else ''}.json"
    (args.out / name).write_text(json.dumps(rows, indent=1))
    print(f"{sum(r['ok'] for r in rows)} passed, {sum(not r['ok'] for r in rows)} failed")


if __name__ == "__main__":
    main()
