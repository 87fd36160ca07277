"""Every report under docs/results is what the project's own code makes of the raw files beside it.

A hand edit to a summary, a table or a note shows up here as a difference; the fix is to change
the raw files (or notes.md) and regenerate, never to patch the report.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest

from kernelloop.evals.report import NOTES_MD, REPORT_HTML, REPORT_MD, SUMMARY_JSON, regenerate

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
BENCH_REPORTS = ["h100_examples", "h100_attention_baselines",  # python -m kernelloop.evals.report DIR
                 *(f"h200_timed_leaderboard/run{i}" for i in (1, 2, 3))]
SCRIPT_REPORTS = {"trust_boundary": "corpus_run.py", "h100_kernelbench_baselines": "kernelbench_baselines.py",
                  "h100_large_references": "large_references.py", "h100_attention_starters": "attention_starters.py",
                  "h100_attention_eval_cost": "attention_baselines.py", "h100x2_pool_throughput": "pool_throughput.py",
                  "h100_cold_verify": "cold_verify.py", "cpu_cold_verify": "cold_verify.py",
                  "h200_cold_verify": "cold_verify.py", "h200_cold_verify_2": "cold_verify.py",
                  "h200_cold_verify_3": "cold_verify.py", "h100_cold_verify_2": "cold_verify.py",
                  "h200_pool_throughput": "pool_throughput.py", "h200_pool_throughput_2": "pool_throughput.py",
                  "h200x2_pool_throughput": "pool_throughput.py", "leaderboard_lint": "leaderboard_lint.py",
                  "h200_containment": "containment_report.py",
                  "h200_leaderboard_rejudge": "leaderboard_rejudge.py"}
_DATA_URI = re.compile(r"data:image/png;base64,[A-Za-z0-9+/=]+")


def _script(name: str):
    path = RESULTS.parents[1] / "benchmarks" / name
    spec = importlib.util.spec_from_file_location(f"shipped_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", BENCH_REPORTS)
def test_a_bench_report_is_made_again_from_its_raw_files(tmp_path, name):
    shipped = RESULTS / name
    remade = tmp_path / name
    remade.mkdir(parents=True)
    for raw in [*shipped.glob("results*.jsonl"), shipped / NOTES_MD]:
        if raw.is_file():
            shutil.copy(raw, remade / raw.name)
    files = regenerate(remade)
    assert files.summary_json.read_text() == (shipped / SUMMARY_JSON).read_text()
    assert files.report_md.read_text() == (shipped / REPORT_MD).read_text()
    # The embedded plots depend on matplotlib's build; the page around them must not.
    page, shipped_page = files.report_html.read_text(), (shipped / REPORT_HTML).read_text()
    assert _DATA_URI.sub("PNG", page) == _DATA_URI.sub("PNG", shipped_page)


@pytest.mark.parametrize("name", sorted(SCRIPT_REPORTS))
def test_a_benchmark_readme_is_made_again_from_its_raw_files(name):
    assert _script(SCRIPT_REPORTS[name]).report(RESULTS / name) == (RESULTS / name / "README.md").read_text()


def test_every_generated_report_is_checked_here():
    """A new report dir must be added above, with the code that makes it."""
    made = {str(p.parent.relative_to(RESULTS))
            for p in [*RESULTS.glob("*/report.md"), *RESULTS.glob("h200_timed_leaderboard/*/report.md")]}
    written_by = {p.parent.name for p in RESULTS.glob("*/README.md") if "Written by `benchmarks/" in p.read_text()}
    assert made == set(BENCH_REPORTS)
    assert written_by == set(SCRIPT_REPORTS)


def test_the_example_report_says_what_was_not_run():
    report = (RESULTS / "h100_examples" / REPORT_MD).read_text()
    assert "13_CumsumRows was not run" in report and "| 13_CumsumRows |" not in report


def test_the_readme_table_is_copied_from_the_generated_report():
    readme = (RESULTS.parents[1] / "README.md").read_text()
    report = (RESULTS / "h100_examples" / REPORT_MD).read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| eager |")]
    assert rows and all(row in report.splitlines() for row in rows)
    assert "13_CumsumRows was not" in readme


def test_the_critique_set_report_is_made_again_from_its_h100_recordings(tmp_path):
    """docs/results/critique_set: the table and every critique, from the verdicts kept as fixtures."""
    from benchmarks import critique_set  # its dataclasses need a module in sys.modules, unlike _script's

    raw = RESULTS.parents[1] / "tests" / "fixtures" / "faulty_kernels" / "recorded_gpu"
    assert critique_set.report(raw, docs=tmp_path) == 0  # no fact missed
    shipped = RESULTS / "critique_set"
    for made in tmp_path.rglob("*.md"):
        assert made.read_text() == (shipped / made.relative_to(tmp_path)).read_text(), made.name
