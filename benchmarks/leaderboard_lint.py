"""The static lint alone over every KernelBench leaderboard solution: how often it rejects honest model output.

  python benchmarks/leaderboard_lint.py --source LEADERBOARD --label NAME --out DIR   # DIR/verdicts_NAME.jsonl
  python benchmarks/leaderboard_lint.py --report DIR     # DIR/README.md from the raw files and DIR/review.json

LEADERBOARD is the KernelBench leaderboard's repository (github.com/anneouyang/KernelBenchLeaderboard,
the site of ScalingIntelligence's KernelBench), as a bare git dir or a checkout: docs/assets/raw_data.json
holds every solution's code with its level, problem id (0-based) and model; docs/assets/problems holds
the problems as l{level}_p{number}.py. Nothing runs and no GPU is needed: each solution goes through
the verifier's precheck (it parses, it has ModelNew, it breaks no static rule) with its own problem
file loaded beside it. Only the verdicts are kept, never the solutions' code.

review.json is written by hand after reading each rejected solution: solution id -> {"rule": the
start of the rule that fired, "right": whether the rejection is right (a cheat or a real rule
break), "why": one line}. The report merges it; a rejection with no review (or a review of another
rule) shows as unreviewed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections import Counter
from pathlib import Path

from kernelloop.evals.listed import DATA, PROBLEMS, RAW_DATA, Leaderboard, leaderboard_problem_file

ROOT = Path(__file__).resolve().parents[1]
LINT_FILES = ("kernelloop/tools/verify/static_check.py", "kernelloop/tools/verify/bindings.py",
              "kernelloop/tools/verify/native_scan.py")


def lint_commit() -> str:
    """The commit of the lint this process imports (+dirty when its files differ from it)."""
    import kernelloop

    repo = Path(kernelloop.__file__).resolve().parents[1]
    found = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%h", "--", *LINT_FILES],
                           capture_output=True, text=True)
    if found.returncode != 0 or not found.stdout.strip():
        raise SystemExit(f"{repo} is not a git checkout: pass --lint-commit")
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", *LINT_FILES],
                           capture_output=True, text=True).stdout.strip()
    return found.stdout.strip() + ("+dirty" if dirty else "")


def run(source: Path, label: str, out: Path, commit: str | None) -> Path:
    from kernelloop.problem import Candidate, Problem
    from kernelloop.tools.verify.verifier import precheck

    board = Leaderboard(source)
    solutions = json.loads(board.read(RAW_DATA))
    titles = {}  # (level, number) -> "40_LayerNorm", from the leaderboard's own table
    for key in json.loads(board.read(DATA)):
        level, _, title = key.partition(": ")
        titles[(int(level.split()[-1]), int(title.split("_", 1)[0]))] = title
    problems = out / ".problems"  # the problem files, loaded as the verifier loads them, then removed
    problems.mkdir(parents=True, exist_ok=True)
    rows = []
    for solution in sorted(solutions, key=lambda s: (s["level"], s["problem_id"], s["display_name"], s["file"])):
        level, number = solution["level"], solution["problem_id"] + 1
        name = leaderboard_problem_file(level, number)
        problem_file = problems / name
        problem_file.write_text(board.read(f"{PROBLEMS}/{name}"))
        problem = Problem.from_file(problem_file)
        verdict = precheck(Candidate(source=solution["code"]), "cpu")
        rows.append({
            "id": solution["file"], "level": level, "problem": number,
            "problem_name": titles.get((level, number), problem.name), "problem_sha256": problem.sha256[:16],
            "model": solution["display_name"], "model_id": solution["model"],
            "verdict": "pass" if verdict is None else verdict.status.value,
            "code": None if verdict is None else verdict.code.value,
            "rule": None if verdict is None else verdict.reason,
        })
    for path in problems.iterdir():
        path.unlink()
    problems.rmdir()
    out.mkdir(parents=True, exist_ok=True)
    raw = out / f"verdicts_{label}.jsonl"
    raw.write_text("".join(json.dumps(row) + "\n" for row in rows))
    runs_path = out / "runs.json"
    runs = json.loads(runs_path.read_text()) if runs_path.is_file() else {}
    runs[label] = {"lint_commit": commit or lint_commit(), "source": "github.com/anneouyang/KernelBenchLeaderboard",
                   "source_commit": board.commit(), "solutions": len(rows)}
    runs_path.write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
    return raw


def rule_class(rule: str) -> str:
    """The rule that fired, in a few words: "forbidden call: input", "monkeypatch: custom_op"."""
    kind = rule.split(":", 1)[0]
    for pattern in (r"^forbidden call: (private attribute \w+|\.\w+|\w+) \(", r"^monkeypatch: `(\w+)`",
                    r"^forbidden import: ([\w.]+)", r"^monkeypatch: (assignment to [\w.\[\]]+)"):
        match = re.match(pattern, rule)
        if match:
            return f"{kind}: {match.group(1)}"
    return kind


def report(folder: Path) -> str:
    """Counts per level and every rejection with its rule and review, one section per raw file."""
    runs = json.loads((folder / "runs.json").read_text())
    review_path = folder / "review.json"
    review = json.loads(review_path.read_text()) if review_path.is_file() else {}
    lines = ["# The static lint on the KernelBench leaderboard's solutions", "",
             "Written by `benchmarks/leaderboard_lint.py --report` from the raw files beside it "
             "(`verdicts_*.jsonl`: one line per solution, the lint's verdict and the rule that fired; "
             "`review.json`: each rejection judged by hand after reading the solution). Only the lint runs "
             "(the verifier's precheck: it parses, it has ModelNew, it breaks no static rule), on the CPU; "
             "a rejection is *false* when the solution is honest model output the rule misjudged.", ""]
    for raw in sorted(folder.glob("verdicts_*.jsonl")):
        label = raw.stem.removeprefix("verdicts_")
        meta = runs.get(label, {})
        rows = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
        rejected = [r for r in rows if r["verdict"] == "rejected"]

        def judged(row: dict) -> str:
            entry = review.get(row["id"])
            if entry is None or not row["rule"].startswith(entry.get("rule", "\0")):
                return "unreviewed"
            return "right" if entry["right"] else "false"

        lines += [f"## {label}: lint at {meta.get('lint_commit', '?')}", "",
                  f"{len(rows)} solutions of {meta.get('source', '?')} at {meta.get('source_commit', '?')[:12]}; "
                  f"{len(rejected)} rejected by the lint, of them "
                  f"{sum(judged(r) == 'false' for r in rejected)} false, {sum(judged(r) == 'right' for r in rejected)} "
                  f"right, {sum(judged(r) == 'unreviewed' for r in rejected)} unreviewed.", "",
                  "| level | solutions | pass | rejected | false | right | unreviewed | did not parse / no ModelNew |",
                  "|---|---|---|---|---|---|---|---|"]
        for level in sorted({r["level"] for r in rows}):
            here = [r for r in rows if r["level"] == level]
            bad = [r for r in here if r["verdict"] == "rejected"]
            counts = Counter(judged(r) for r in bad)
            lines.append(f"| {level} | {len(here)} | {sum(r['verdict'] == 'pass' for r in here)} | {len(bad)} | "
                         f"{counts['false']} | {counts['right']} | {counts['unreviewed']} | "
                         f"{sum(r['verdict'] == 'compile_error' for r in here)} |")
        lines.append("")
        if rejected:
            lines += ["| solution | level | problem | model | rule | review | why |", "|---|---|---|---|---|---|---|"]
            for r in rejected:
                why = review.get(r["id"], {}).get("why", "") if judged(r) != "unreviewed" else ""
                lines.append(f"| {r['id'][:12]} | {r['level']} | {r['problem_name']} | {r['model']} | "
                             f"{rule_class(r['rule'])} | {judged(r)} | {why.replace('|', '/')} |")
            lines.append("")
        by_rule = Counter(rule_class(r["rule"]) for r in rejected)
        if by_rule:
            lines += ["Rules that fired: " + ", ".join(f"{rule} ({n})" for rule, n in sorted(by_rule.items())) + ".", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, help="the leaderboard repository: a bare git dir or a checkout")
    parser.add_argument("--label", help="names the raw file: verdicts_LABEL.jsonl")
    parser.add_argument("--lint-commit", help="the commit of the imported lint (default: asked of its git checkout)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "leaderboard_lint")
    parser.add_argument("--report", type=Path, help="write DIR/README.md from the raw files in DIR")
    args = parser.parse_args()
    if args.report:
        (args.report / "README.md").write_text(report(args.report))
        return
    if not args.source or not args.label:
        parser.error("--source and --label (or --report DIR)")
    raw = run(args.source, args.label, args.out, args.lint_commit)
    rows = [json.loads(line) for line in raw.read_text().splitlines()]
    print(f"{raw}: {len(rows)} solutions, {sum(r['verdict'] == 'rejected' for r in rows)} rejected by the lint")
    (args.out / "README.md").write_text(report(args.out))


if __name__ == "__main__":
    main()
