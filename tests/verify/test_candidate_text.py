"""Candidate text is data: a verdict's reason, feedback and output tails are shown, never obeyed.

A candidate decides what its exception says and what it prints, so every sink (the CLI's Rich
output, the live view, bench's report.md and report.html, a run's report.md) gets text that could
be Rich markup, a terminal escape, a carriage return that Python's splitlines() splits on, HTML,
a Markdown image of a host file, or a megabyte. None of it may crash a command, change what a
reader sees, or make the report read a file.
"""

from __future__ import annotations

import base64
import io

import pytest
from rich.console import Console

from kernelloop import safe_text
from kernelloop.records import Code, Status, Verdict

HOSTILE = {
    "closing_tag": "boom [/] after",
    "style_tag": "[bold red]looks like an error[/bold red]",
    "carriage_return": "fine\r![secret](/etc/passwd)",
    "ansi": "plain \x1b[2J\x1b[31mred\x1b]0;title\x07 text",
    "html": "</td><img src=file:///etc/passwd><script>alert(1)</script>",
    "markdown_image": "![x](/etc/passwd) and [link](http://example.invalid/x)",
    "line_separators": "a\u2028b\x85c\x0bd\x1ce|f",
    "megabyte": "m" * (1 << 20),
    "lone_surrogates": "bad \ud800 and \udcff end",  # no UTF-8 writer takes them (red team: stopped bench and solve)
}


def _verdict(text: str) -> Verdict:
    return Verdict(status=Status.runtime_error, reason=text, code=Code.raised, feedback=text, stdout_tail=text,
                   stderr_tail=text, warnings=[text], suspicious=[text], own_kernels=[text])


# ------------------------------------------------------------------------- kept: the record itself

@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_verdict_keeps_its_text_bounded_and_free_of_control_characters(name):
    verdict = _verdict(HOSTILE[name])
    for text in (verdict.reason, verdict.feedback, verdict.stdout_tail, verdict.stderr_tail, *verdict.warnings):
        assert "\x1b" not in text and "\r" not in text and "\u2028" not in text and "\x85" not in text
        assert len(text) <= safe_text.TEXT_CHARS
        text.encode("utf-8")  # raises on a lone surrogate
    verdict.model_dump_json()
    assert "\n" not in verdict.reason and len(verdict.reason) <= safe_text.REASON_CHARS
    verdict.reason = HOSTILE[name]  # set later, as the verifier does with the tails: kept the same way
    assert "\r" not in verdict.reason and len(verdict.reason) <= safe_text.REASON_CHARS
    again = Verdict.model_validate(_verdict(HOSTILE[name]).model_dump() | {"reason": HOSTILE[name]})
    assert "\r" not in again.reason  # read back from a file someone else wrote


def test_text_that_is_cut_says_so():
    verdict = _verdict(HOSTILE["megabyte"])
    assert "characters cut" in verdict.reason and verdict.stdout_tail.endswith("m")  # a tail keeps its end


# ------------------------------------------------------------------------- shown: the CLI

def _capture(monkeypatch, module) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(module, "console", Console(file=out, width=100, color_system=None))
    return out


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_kernelloop_verify_prints_any_reason_literally(monkeypatch, name):
    from kernelloop.cli import verify_cmd

    out = _capture(monkeypatch, verify_cmd)
    verify_cmd.print_verdict(_verdict(HOSTILE[name]))  # a MarkupError here was a crash of the command
    printed = out.getvalue()
    assert "\x1b" not in printed and "\r" not in printed
    if name in ("closing_tag", "style_tag"):
        assert HOSTILE[name] in printed.replace("\n", "")  # the brackets are shown, not obeyed


def test_the_live_view_and_the_runs_tables_show_markup_as_text():
    from kernelloop.cli._common import plain, quoted
    from kernelloop.cli._live import LiveView
    from kernelloop.graph.context import RunEvent

    view = LiveView(enabled=False)
    view.on_event(RunEvent(kind="verified", attempt_id="r1c0", status="runtime_error", message=HOSTILE["closing_tag"]))
    view.on_event(RunEvent(kind="retrying", message=HOSTILE["style_tag"]))
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(view._render())
    assert "boom [/] after" in out.getvalue() and "[bold red]" in out.getvalue()
    assert str(plain(HOSTILE["ansi"])) == "plain red text"
    assert "\r" not in quoted(HOSTILE["carriage_return"])


# ------------------------------------------------------------------------- shown: bench's report

def _bench_summary(reason: str, problem: str = "relu"):
    from kernelloop.evals import metrics
    from kernelloop.evals.records import BenchRecord, Mode, RunEnvironment

    env = RunEnvironment(device="cpu", torch_version="2.x", kernelloop_version="0")
    record = BenchRecord(suite="s", mode=Mode.candidates, job_key="k", problem=problem, problem_path="p",
                         problem_sha256="0", attempt=0, status=Status.runtime_error, reason=reason, elapsed_s=1.0,
                         environment=env, suspicious=[reason])
    return metrics.summarize("s", Mode.candidates, [problem], [record], notes=[reason])


def test_a_reason_cannot_make_report_html_embed_a_host_file(tmp_path):
    """The review's attack: `\\r` is a line break to splitlines() but not to the cell escaper, so
    `![..](/path)` after it became an image line of its own, read and embedded by report.html."""
    from kernelloop.evals.report import write_report

    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"TOP-SECRET-CONTENTS")
    reason = f"crashed\r![leak]({secret})\n![leak2]({secret})"
    files = write_report(tmp_path / "out", _bench_summary(reason))
    page = files.report_html.read_text()
    assert base64.b64encode(secret.read_bytes()).decode() not in page
    assert "TOP-SECRET" not in page
    assert f"![leak]({secret})" in page  # shown as the text it is
    markdown = files.report_md.read_text()
    assert not any(line.startswith("![leak") for line in markdown.splitlines())


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_report_md_and_html_show_any_reason_literally(tmp_path, name):
    from kernelloop.evals.report import write_report

    files = write_report(tmp_path / "out", _bench_summary(HOSTILE[name], problem=f"p|{name}<b>"))
    markdown, page = files.report_md.read_text(), files.report_html.read_text()
    for line in markdown.splitlines():
        assert not line.startswith("![") or line.startswith("![solve_curve]"), line
    rows = [line for line in markdown.splitlines() if line.startswith(f"| p\\|{name}")]
    assert len(rows) == 1 and rows[0].count(" | ") == rows[0].replace("\\|", "").count(" | ")
    assert "<img src=file" not in page and "<script>" not in page and "</td><img" not in page
    assert "\r" not in page and "\x1b" not in page and len(page) < 200_000
    if name == "html":
        assert "&lt;/td&gt;&lt;img src=file:///etc/passwd&gt;" in page
    if name == "markdown_image":
        assert "![x](/etc/passwd) and [link](http://example.invalid/x)" in page and "<a " not in page
    assert f"p|{name}&lt;b&gt;" in page  # a problem's name is text too


def test_markdown_cells_escape_what_would_change_the_table():
    assert safe_text.md_cell("a|b`c`[d](e)<f>&g\\") == "a\\|b\\`c\\`\\[d\\](e)\\<f\\>\\&g\\\\"
    assert safe_text.md_note("see `a|[b]` and [c]") == "see `a|[b]` and \\[c\\]"


def test_a_run_report_escapes_reasons_and_critiques():
    from kernelloop.agents.records import Attempt
    from kernelloop.graph.report import _attempt_row

    attempt = Attempt(id="r1c0", round=1, index=0, backend="triton", verdict=_verdict(HOSTILE["markdown_image"]))
    row = _attempt_row(attempt, "eager")
    assert row.count(" | ") == 6 and "\\[link\\]" in row and "![x]" not in row
    attempt.verdict.reason = "x\r\n| forged | row |"
    assert "\n" not in _attempt_row(attempt, "eager")


def test_runs_list_show_and_a_runs_report_take_any_reason(tmp_path):
    """`kernelloop runs show` printed a verdict's reason as Rich markup: `[/]` in it was a crash."""
    from typer.testing import CliRunner

    from kernelloop.cli import app
    from kernelloop.serve.runs import solve
    from tests.graph.scripted import RELU_PROBLEM, ScriptedChatClient, ScriptedVerifier

    reason = "boom [/] [bold red]x[/bold red]\r![p](/etc/passwd) \x1b[31m"

    class Hostile(ScriptedVerifier):
        def verify(self, candidate, problem, time_left_s=None) -> Verdict:
            verdict = super().verify(candidate, problem)
            verdict.reason = reason
            return verdict

    solve(RELU_PROBLEM, chat_client=ScriptedChatClient(), verifier=Hostile(), workspace=tmp_path, candidates=2,
          thread_id="t", analyze=lambda problem: None)
    for args in (["runs", "show", "t"], ["runs", "list"]):
        result = CliRunner().invoke(app, [*args, "--workspace", str(tmp_path)])
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.stdout and "\r" not in result.stdout
    shown = CliRunner().invoke(app, ["runs", "show", "t", "--workspace", str(tmp_path)], env={"COLUMNS": "400"})
    assert "boom [/] [bold red]x[/bold red]" in shown.stdout
    report = (tmp_path / "runs" / "t" / "report.md").read_text()
    assert "boom \\[/\\] \\[bold red\\]x\\[/bold red\\] !\\[p\\](/etc/passwd)" in report


def test_the_corpus_text_attacks_end_to_end(tmp_path, monkeypatch):
    """The two corpus fixtures of this class, judged by the real verifier (static rules off: one
    forges its own result on the job's channel), then printed by the CLI and put in bench's report."""
    from pathlib import Path

    from kernelloop.cli import verify_cmd
    from kernelloop.evals.report import write_report
    from kernelloop.problem import Candidate, Problem
    from kernelloop.tools.verify.verifier import Verifier

    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    passwd = Path("/etc/passwd").read_bytes() if Path("/etc/passwd").is_file() else b"root:x:0:0"
    with Verifier(device="cpu", workspace=tmp_path / "ws", time_it=False, static_checks=False) as verifier:
        for name in ("markup_in_reason", "report_image_in_reason"):
            verdict = verifier.verify(Candidate.from_file(fixtures / "cheats" / f"{name}.py"),
                                      Problem.from_file(fixtures / "problems" / "relu.py"))
            assert verdict.status is Status.runtime_error, verdict.reason
            out = _capture(monkeypatch, verify_cmd)
            verify_cmd.print_verdict(verdict)
            assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()
            files = write_report(tmp_path / name, _bench_summary(verdict.reason))
            page = files.report_html.read_text()
            assert base64.b64encode(passwd).decode()[:40] not in page and passwd[:20].decode() not in page
            assert "<img src=file" not in page
    assert "[/]" in out.getvalue() or "leak" in out.getvalue()
