"""Run corpus fixtures through one verifier and print attack -> verdict -> speed as a table.

  python benchmarks/corpus_run.py [--device cuda] [--unlinted] [--no-time] [--out DIR] [NAME ...]

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--unlinted", action="store_true", help="static rules off: the trust boundary alone")
    parser.add_argument("--no-time", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/kernelloop-out")))
    args = parser.parse_args()
    paths = sorted((FIXTURES / "cheats").glob("*.py")) + sorted((FIXTURES / "honest").glob("*.py"))
    if args.names:
        paths = [p for p in paths if p.stem in args.names]
    elif args.unlinted:
        paths = [p for p in paths if "unlinted" in header(p)]
    workspace = args.out / "corpus-workspace"
    rows = []
    with Verifier(device=args.device, workspace=workspace, static_checks=not args.unlinted,
                  time_it=not args.no_time, compile_timeout_s=60, run_timeout_s=180) as verifier:
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
            if "sandbox worker died" in verdict.reason:
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
