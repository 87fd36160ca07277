"""Write a bench run's outputs: summary.json, report.md, report.html and the plots beside them.

Numbers are rounded here, for display only; summary.json keeps them whole. Everything here is a
function of the summary alone, so a report can be made again from its results.jsonl
(`python -m kernelloop.evals.report OUT_DIR`) and must come out the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kernelloop.evals import plots
from kernelloop.evals.attention import FLEX_BASELINE, speedups_over_flex
from kernelloop.evals.claims import claims_markdown
from kernelloop.evals.html import markdown_to_html
from kernelloop.evals.records import COMPILE, EAGER, BenchSummary, Mode
from kernelloop.safe_text import md_cell, md_note

SUMMARY_JSON = "summary.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOTS_DIR = "plots"


@dataclass
class ReportFiles:
    summary_json: Path
    report_md: Path
    report_html: Path
    plots: dict[str, Path] = field(default_factory=dict)
    skipped_plots: list[str] = field(default_factory=list)  # one line per plot left out, saying why


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _tokens(value: float) -> str:
    return f"{value:,.0f}"


def _token_figures(summary: BenchSummary) -> tuple[str, str]:
    """(per solved problem, cost) as shown: a number, or why there is none."""
    usage = summary.tokens
    per_solved = _tokens(summary.tokens_per_solved) if summary.tokens_per_solved is not None else summary.tokens_note
    cost = f"${usage.cost_usd:.4f}" if usage is not None and usage.cost_usd is not None else "no prices given"
    return per_solved, cost


def tokens_line(summary: BenchSummary) -> str:
    """The run's tokens in one line (the console's); 'no model calls', never zeros, where none was made."""
    usage = summary.tokens
    if usage is None:
        return f"tokens: {summary.tokens_note or 'not recorded'}"
    per_solved, cost = _token_figures(summary)
    return (f"tokens: {_tokens(usage.total_tokens)} over {usage.calls:,} model calls ({_tokens(usage.prompt_tokens)} "
            f"prompt + {_tokens(usage.completion_tokens)} completion, of which {_tokens(usage.reasoning_tokens)} "
            f"reasoning); per solved problem: {per_solved}; cost: {cost}")


def draw_plots(summary: BenchSummary, plot_dir: Path, attention: bool) -> tuple[dict[str, Path], list[str]]:
    """The plots this run has data for, and one line per plot left out saying why."""
    made: dict[str, Path] = {}
    skipped: list[str] = []
    rows = summary.per_problem
    if attention and summary.mode is not Mode.baselines:
        variants = speedups_over_flex(summary)
        if any(v is not None for v in variants.values()):
            made["variant_speedups"] = plots.plot_variant_speedups(variants, plot_dir / "variant_speedups.png")
        else:
            skipped.append("speedup per variant over FlexAttention: no speedup over it was measured "
                           "(nothing solved, or a CPU run)")
    if summary.mode is not Mode.baselines:
        made["solve_curve"] = plots.plot_solve_curve([r.time_to_solve_s for r in rows], len(rows),
                                                     plot_dir / "solve_rate_vs_time.png")
        distribution = {b: [r.speedups[b] for r in rows if r.solved and b in r.speedups]
                        for b in sorted({b for r in rows for b in r.speedups})}
        if any(distribution.values()):
            made["speedup_distribution"] = plots.plot_speedup_distribution(
                distribution, plot_dir / "speedup_distribution.png")
        else:
            skipped.append("speedup distribution: no correct kernel has a measured speedup")
    return made, skipped


def render_markdown(summary: BenchSummary, plot_paths: dict[str, Path], skipped: list[str], out_dir: Path) -> str:
    lines = [f"# kernelloop bench: {md_cell(summary.suite)} ({summary.mode.value})", ""]
    for env in summary.environments:
        where = env.gpu_name or "CPU"
        lines.append(f"Measured on {where} ({env.device}), torch {env.torch_version}, "
                     f"triton {env.triton_version or 'not installed'}, kernelloop {env.kernelloop_version}"
                     + (f", host {env.hostname}" if env.hostname else "") + ".")
    lines += ["", f"Written {summary.created_at:%Y-%m-%d %H:%M} UTC.", ""]
    if summary.mode is Mode.baselines:
        lines += _baseline_tables(summary)
    else:
        lines += _metric_tables(summary)
    lines += _token_table(summary)
    if summary.claims is not None:
        lines += claims_markdown(summary.claims)
    flagged = [(p.problem, line) for p in summary.per_problem for line in p.suspicious]
    if flagged:  # speedups the verifier found too good to be true stay in the metrics, marked here
        lines += ["## Suspicious results (check by hand)", "",
                  *(f"- {md_cell(problem)}: {md_cell(line)}" for problem, line in flagged), ""]
    if plot_paths:
        lines += ["## Plots", ""]
        for name, path in plot_paths.items():
            lines += [f"![{name}]({path.relative_to(out_dir).as_posix()})", ""]
    notes = [*summary.notes, *(f"plot left out: {line}" for line in skipped)]
    if notes:
        lines += ["## Notes", "", *(f"- {md_note(n)}" for n in notes), ""]
    return "\n".join(lines)


def _token_table(summary: BenchSummary) -> list[str]:
    usage = summary.tokens
    if usage is None:
        note = summary.tokens_note or "not recorded"
        return ["## Tokens", "", f"{note[:1].upper()}{note[1:]}.", ""]
    per_solved, cost = _token_figures(summary)
    return ["## Tokens", "",
            "As the server reported them, summed over every model call of every problem; completion includes "
            "reasoning; per solved problem: all tokens over the problems solved.", "",
            "| model calls | prompt | completion | reasoning | total | per solved problem | cost |", "|---" * 7 + "|",
            f"| {usage.calls:,} | {_tokens(usage.prompt_tokens)} | {_tokens(usage.completion_tokens)} | "
            f"{_tokens(usage.reasoning_tokens)} | {_tokens(usage.total_tokens)} | {per_solved} | {cost} |", ""]


def _metric_tables(summary: BenchSummary) -> list[str]:
    lines = [f"{summary.solved} of {summary.problems} problems solved "
             f"(correctness rate {_pct(summary.correctness_rate)}), {summary.attempts} attempts.", "",
             "## KernelBench metrics", "",
             "fast_p: share of all problems correct with speedup > p (fast_0 = correctness rate); "
             "geomean over correct problems with a measured speedup; \"not timed\": no speed was measured "
             "against that baseline, so only fast_0 means anything.", ""]
    thresholds = list(next(iter(summary.by_baseline.values())).fast_p) if summary.by_baseline else []
    lines.append("| against | " + " | ".join(f"fast_{p}" for p in thresholds) + " | geomean speedup | timed |")
    lines.append("|---" * (len(thresholds) + 3) + "|")
    for name, metrics in summary.by_baseline.items():
        # Without a timing, fast_p over 0 is unknown, not 0.0%.
        cells = [_pct(metrics.fast_p[p]) if p == "0" or metrics.timed else "not timed" for p in thresholds]
        lines.append(f"| {md_cell(name)} | " + " | ".join(cells) + f" | {_x(metrics.geomean_speedup)} | {metrics.timed} |")
    baselines = [b for b in (EAGER, COMPILE, FLEX_BASELINE) if b in summary.by_baseline]
    baselines += [b for b in summary.by_baseline if b not in baselines]
    tokens = summary.tokens is not None  # a tokens column only where a model was called
    lines += ["", "## Per problem", "",
              "| problem | solved | best status | attempts | " + " | ".join(f"vs {md_cell(b)}" for b in baselines)
              + " | time to solve |" + (" tokens |" if tokens else "") + " reason |",
              "|---" * (len(baselines) + 6 + tokens) + "|"]
    for row in summary.per_problem:
        speed = " | ".join(_x(row.speedups.get(b)) for b in baselines)
        solve = "-" if row.time_to_solve_s is None else f"{row.time_to_solve_s:.1f} s"
        status = row.best_status.value if row.best_status else "-"
        used = (f" {_tokens(row.tokens.total_tokens) if row.tokens else '-'} |") if tokens else ""
        lines.append(f"| {md_cell(row.problem)} | {'yes' if row.solved else 'no'} | {status} | {row.attempts} | {speed} | "
                     f"{solve} |{used} {md_cell(row.reason)} |")
    return lines + [""] + _workload_table(summary)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _workload_table(summary: BenchSummary) -> list[str]:
    """Problems with workloads (get_workloads): each workload's status, speed and times; the per-problem
    speedups above are their geometric mean. Nothing for a suite without any."""
    rows = [row for row in summary.per_problem if row.workloads]
    if not rows:
        return []
    lines = ["## Per workload", "",
             "Problems judged on several workloads: correct only where right on every one; the speedup above is "
             "the geometric mean of theirs over eager.", "",
             "| problem | workload | status | vs eager | candidate ms | eager ms | note |", "|---" * 7 + "|"]
    for row in rows:
        for name, result in row.workloads.items():
            candidate, eager = (_ms(result.times_ms.get(side)) for side in ("candidate", EAGER))
            note = "slowest" if name == row.slowest_workload else result.reason
            lines.append(f"| {md_cell(row.problem)} | {md_cell(name)} | {result.status.value} | {_x(result.speedup)} | "
                         f"{candidate} | {eager} | {md_cell(note)} |")
    return lines + [""]


def _baseline_tables(summary: BenchSummary) -> list[str]:
    names = sorted({n for row in summary.per_problem for n in row.baseline_ms},
                   key=lambda n: (n not in (EAGER, COMPILE), n))
    lines = ["## Baseline timings (median ms per call)", "",
             "| problem | " + " | ".join(map(md_cell, names)) + " | note |", "|---" * (len(names) + 2) + "|"]
    for row in summary.per_problem:
        cells = " | ".join("-" if n not in row.baseline_ms else f"{row.baseline_ms[n]:.4f}" for n in names)
        lines.append(f"| {md_cell(row.problem)} | {cells} | {md_cell(row.reason)} |")
    return lines + [""]


def write_report(out_dir: Path, summary: BenchSummary, attention: bool = False) -> ReportFiles:
    """summary.json, report.md, report.html (plots embedded) and plots/*.png under out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary_path = out_dir / SUMMARY_JSON
    # No claims key where the input carried none: summary.json stays as it was for every other run.
    summary_path.write_text(summary.model_dump_json(indent=2, exclude={"claims"} if summary.claims is None else None)
                            + "\n")
    plot_paths, skipped = draw_plots(summary, out_dir / PLOTS_DIR, attention)
    report_path = out_dir / REPORT_MD
    markdown = render_markdown(summary, plot_paths, skipped, out_dir)
    report_path.write_text(markdown)
    html_path = out_dir / REPORT_HTML
    images = {path.relative_to(out_dir).as_posix(): path for path in plot_paths.values()}
    html_path.write_text(markdown_to_html(markdown, images))
    return ReportFiles(summary_path, report_path, html_path, plot_paths, skipped)


# --------------------------------------------------------------------------- made again from raw files

NOTES_MD = "notes.md"  # what the records can't say (where a call was cut short), one "- " bullet each


def _notes_file(path: Path) -> list[str]:
    """The bullets of notes.md; a bullet's continuation lines are joined to it."""
    if not path.is_file():
        return []
    notes: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("- "):
            notes.append(line[2:].strip())
        elif line.strip() and notes:
            notes[-1] += " " + line.strip()
    return notes


def regenerate(out_dir: Path) -> ReportFiles:
    """summary.json, report.md, report.html and plots made again from out_dir's raw files alone:
    every results*.jsonl, and notes.md. The suite is named after the directory; the problems
    are those with records (in problem-number order); the date is that of the last record."""
    from kernelloop.evals.metrics import summarize
    from kernelloop.evals.records import BenchRecord

    records = [BenchRecord.model_validate_json(line) for path in sorted(out_dir.glob("results*.jsonl"))
               for line in path.read_text().splitlines() if line.strip()]
    if not records:
        raise ValueError(f"{out_dir}: no results*.jsonl with bench records")
    modes = {record.mode for record in records}
    if len(modes) != 1:
        raise ValueError(f"{out_dir}: records of several modes ({', '.join(sorted(m.value for m in modes))})")
    names = sorted({r.problem for r in records}, key=lambda n: (int(n.split("_")[0]) if n.split("_")[0].isdigit()
                                                                else 1 << 30, n))
    notes = _notes_file(out_dir / NOTES_MD)
    if any(r.environment.device == "cpu" for r in records):
        notes.insert(0, "some results are from the CPU (Triton interpreter): correctness only, no speed measured")
    summary = summarize(out_dir.name, modes.pop(), names, records, notes)
    summary.created_at = max(r.finished_at for r in records)
    return write_report(out_dir, summary, attention=all(r.suite == "attention" for r in records))


if __name__ == "__main__":  # python -m kernelloop.evals.report DIR...: remake each DIR's report from its raw files
    import sys

    for folder in sys.argv[1:] or sys.exit("usage: python -m kernelloop.evals.report DIR [DIR ...]"):
        print(regenerate(Path(folder)).report_md)
