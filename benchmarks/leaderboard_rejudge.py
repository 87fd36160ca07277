"""The KernelBench leaderboard's solutions judged again by the whole verifier, on a GPU: every rejection listed.

  python benchmarks/leaderboard_rejudge.py --extract RESULTS.jsonl --label NAME --out DIR [--workers N ...]
  python benchmarks/leaderboard_rejudge.py --report DIR     # DIR/README.md from the raw files and DIR/review.json

RESULTS.jsonl is what `kernelloop bench NAME --list raw_data.json --problems-dir ...` wrote (see
benchmarks/gpu_leaderboard.sh, which runs it correctness-only with several workers on one GPU).
--extract keeps one line per solution in DIR/verdicts_NAME.jsonl: its id, model, level, problem,
the leaderboard's claim (it lists only solutions it judged correct, with its speedup) and our verdict,
code and reason (one line, cut). Never the solutions' code. DIR/runs.json says where each raw file
was measured.

review.json is written by hand after reading each rejected solution: solution id -> {"code": the
verdict code it reviews, "right": whether the rejection is right (a cheat, a real error) or false
(the verifier misjudged honest, correct code), "why": one line}. A rejection with no review, or a
review of another code, shows as unreviewed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = "github.com/anneouyang/KernelBenchLeaderboard"
REASON_CHARS = 240
# Codes a GPU shared among correctness workers can cause on its own (memory, time, a dying worker):
# such a rejection is checked again with the GPU alone before it counts against the solution.
SHARING_CODES = ("out_of_memory", "timed_out", "worker_died", "crashed")


def _one_line(text: str, limit: int = REASON_CHARS) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def titles(board: Path) -> dict[tuple[int, int], str]:
    """(level, number) -> "40_LayerNorm", from the leaderboard's own table (docs/assets/data.json)."""
    from kernelloop.evals.listed import DATA, Leaderboard

    found = {}
    for key in json.loads(Leaderboard(board).read(DATA)):
        level, _, title = key.partition(": ")
        found[(int(level.split()[-1]), int(title.split("_", 1)[0]))] = title
    return found


def extract(results: Path, label: str, out: Path, meta: dict, names: dict[tuple[int, int], str] | None = None) -> Path:
    """DIR/verdicts_LABEL.jsonl from bench's results.jsonl (listed solutions only), and its runs.json entry.
    names: the problems' titles by (level, number); else the problem's file name."""
    rows = []
    for line in results.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        claim = record.get("claim")
        if not claim:
            continue
        speedups = record.get("speedups") or {}
        rows.append({
            "id": claim["id"], "model": claim.get("model"), "level": record.get("level"),
            "problem": record.get("number"),
            "problem_name": (names or {}).get((record.get("level"), record.get("number")), record["problem"]),
            "claimed_status": claim.get("status"), "claimed_speedup": (claim.get("speedups") or {}).get("eager"),
            "status": record.get("status"), "code": record.get("code"),
            "reason": _one_line(record.get("problem_error") or record.get("reason") or ""),
            "problem_error": record.get("problem_error") is not None,
            "speedup": speedups.get("eager"), "max_abs_err": record.get("max_abs_err"),
            "elapsed_s": record.get("elapsed_s"), "gpu": record["environment"].get("gpu_name") or "CPU",
        })
    rows.sort(key=lambda r: (r["level"] or 0, r["problem"] or 0, r["id"]))
    out.mkdir(parents=True, exist_ok=True)
    raw = out / f"verdicts_{label}.jsonl"
    raw.write_text("".join(json.dumps(row) + "\n" for row in rows))
    runs_path = out / "runs.json"
    runs = json.loads(runs_path.read_text()) if runs_path.is_file() else {}
    gpus = sorted({r["gpu"] for r in rows})
    runs[label] = {"source": SOURCE, "solutions": len(rows), "gpu": ", ".join(gpus), **meta}
    runs_path.write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
    return raw


def _rows(raw: Path) -> list[dict]:
    return [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]


def _cell(text: object) -> str:
    return _one_line(str(text), 300).replace("|", "/")


def report(folder: Path) -> str:
    """Counts per level and status, then every rejection with the check that fired and its review."""
    runs_path, review_path = folder / "runs.json", folder / "review.json"
    runs = json.loads(runs_path.read_text()) if runs_path.is_file() else {}
    review = json.loads(review_path.read_text()) if review_path.is_file() else {}
    lines = ["# The KernelBench leaderboard's solutions, judged again by the verifier", "",
             "Written by `benchmarks/leaderboard_rejudge.py --report` from the raw files beside it "
             "(`verdicts_*.jsonl`: one line per solution, the leaderboard's claim and our verdict, never the code; "
             "`runs.json`: where each was measured; `review.json`: each rejection judged by hand after reading the "
             "solution). The leaderboard lists only solutions it judged correct, so every rejection here disagrees "
             "with it. A rejection is *false* when the solution is honest, correct code the verifier misjudged.", ""]
    for raw in sorted(folder.glob("verdicts_*.jsonl")):
        label = raw.stem.removeprefix("verdicts_")
        meta = runs.get(label, {})
        rows = _rows(raw)
        judged = [r for r in rows if not r["problem_error"]]
        rejected = [r for r in judged if r["status"] != "correct"]

        def verdict_of(row: dict) -> str:
            entry = review.get(row["id"])
            if entry is None or entry.get("code") != row["code"]:
                return "unreviewed"
            return "right" if entry["right"] else "false"

        claimed_correct = [r for r in rejected if r["claimed_status"] == "correct"]
        timing = {False: "correctness only", True: "timed"}.get(meta.get("timing"), "timing ?")
        lines += [f"## {label}: {meta.get('gpu', '?')}, kernelloop {meta.get('kernelloop_commit', '?')}", "",
                  f"{len(rows)} solutions of {meta.get('source', SOURCE)} at {str(meta.get('source_commit', '?'))[:12]}"
                  f" ({timing}, {meta.get('workers_per_gpu', '?')} worker(s) per GPU); {len(judged)} judged, "
                  f"{len(rows) - len(judged)} not (their problem failed); {len(rejected)} not correct, of them "
                  f"{len(claimed_correct)} the leaderboard claimed correct; reviewed: "
                  f"{sum(verdict_of(r) == 'right' for r in rejected)} right, "
                  f"{sum(verdict_of(r) == 'false' for r in rejected)} false, "
                  f"{sum(verdict_of(r) == 'unreviewed' for r in rejected)} unreviewed.", ""]
        statuses = [s for s in ("correct", "incorrect", "rejected", "compile_error", "runtime_error", "timeout")
                    if any(r["status"] == s for r in judged)]
        lines += ["| level | solutions | " + " | ".join(statuses) + " | problem failed |",
                  "|---" * (len(statuses) + 3) + "|"]
        for level in sorted({r["level"] for r in rows}):
            here = [r for r in rows if r["level"] == level]
            counts = Counter(r["status"] for r in here if not r["problem_error"])
            lines.append(f"| {level} | {len(here)} | " + " | ".join(str(counts[s]) for s in statuses)
                         + f" | {sum(r['problem_error'] for r in here)} |")
        lines.append("")
        if rejected:
            lines += ["| solution | model | level/problem | verdict | check that fired | leaderboard said | review | why |",
                      "|---|---|---|---|---|---|---|---|"]
            for r in rejected:
                entry = review.get(r["id"], {}) if verdict_of(r) != "unreviewed" else {}
                claim = r["claimed_status"] or "-"
                if r["claimed_status"] == "correct":
                    claim = "correct" + (f", {r['claimed_speedup']:.2f}x" if r["claimed_speedup"] else "")
                shared = " (may come from sharing the GPU: check alone)" if (
                    r["code"] in SHARING_CODES and meta.get("workers_per_gpu", 1) != 1) else ""
                lines.append(f"| {r['id'][:12]} | {_cell(r['model'])} | {r['level']}/{r['problem']} "
                             f"({_cell(r['problem_name'])}) | {r['status']} | {r['code']}: {_cell(r['reason'])}{shared} | "
                             f"{claim} | {verdict_of(r)} | {_cell(entry.get('why', ''))} |")
            lines.append("")
            by_code = Counter(r["code"] for r in rejected)
            lines += ["Checks that fired: " + ", ".join(f"{code} ({n})" for code, n in sorted(by_code.items())) + ".", ""]
        failed = [r for r in rows if r["problem_error"]]
        if failed:
            lines += ["Not judged, their problem failed: " + ", ".join(
                f"{r['id'][:12]} ({r['level']}/{r['problem']}: {_cell(r['reason'])})" for r in failed) + ".", ""]
    return "\n".join(lines)


def _commit() -> str:
    found = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extract", type=Path, help="bench's results.jsonl of a --list run")
    parser.add_argument("--label", help="names the raw file: verdicts_LABEL.jsonl")
    parser.add_argument("--out", type=Path, help="where the raw file goes")
    parser.add_argument("--source-commit", default="unknown", help="the leaderboard's commit judged")
    parser.add_argument("--board", type=Path, help="the leaderboard repository, for its problems' titles")
    parser.add_argument("--kernelloop-commit", default=None, help="default: this checkout's HEAD, if it is one")
    parser.add_argument("--workers", type=int, default=1, help="workers per GPU of the run")
    parser.add_argument("--timing", action="store_true", help="the run timed (default: correctness only)")
    parser.add_argument("--report", type=Path, help="write DIR/README.md from the raw files in DIR")
    args = parser.parse_args()
    if args.report:
        (args.report / "README.md").write_text(report(args.report))
        return
    if not (args.extract and args.label and args.out):
        parser.error("--extract, --label and --out (or --report DIR)")
    meta = {"source_commit": args.source_commit, "kernelloop_commit": args.kernelloop_commit or _commit(),
            "timing": args.timing, "workers_per_gpu": args.workers}
    raw = extract(args.extract, args.label, args.out, meta, titles(args.board) if args.board else None)
    rows = _rows(raw)
    print(f"{raw}: {len(rows)} solutions")
    print(f"{'level':>5} {'judged':>6} {'correct':>7} {'not':>4} {'failed':>6}")
    for level in sorted({r["level"] for r in rows}):
        here = [r for r in rows if r["level"] == level]
        judged = [r for r in here if not r["problem_error"]]
        ok = sum(r["status"] == "correct" for r in judged)
        print(f"{level:>5} {len(judged):>6} {ok:>7} {len(judged) - ok:>4} {len(here) - len(judged):>6}")
    print("not correct by code:", dict(Counter(r["code"] for r in rows if r["status"] not in ("correct", None))))


if __name__ == "__main__":
    main()
