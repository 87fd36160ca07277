"""Tokens in bench's summary: the agent loop's model calls totalled over the suite, per solved problem
and priced; 'no model calls' (never zeros) where bench only scored given candidates. End to end:
`kernelloop bench` runs the real loop against the local OpenAI-compatible test server (R1 habits,
`usage` in every reply), and its totals must be the sum of what that server reported."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field

import pytest
from typer.testing import CliRunner

from kernelloop.cli._app import app
from kernelloop.evals import suite as bench
from kernelloop.evals.metrics import add_usage
from kernelloop.evals.records import Mode
from kernelloop.graph.usage import Usage
from kernelloop.records import Status, Verdict
from tests.evals.test_bench import FakeAttempt, run, write_candidate, write_problems
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.graph.scripted import FIXED_KERNEL, PLAN_REPLY, RELU_PROBLEM, WRONG_KERNEL, ScriptedVerifier, coder_reply

runner = CliRunner()


@pytest.fixture(autouse=True)
def no_live_endpoint(monkeypatch):
    for name in ("KERNELLOOP_BASE_URL", "KERNELLOOP_MODEL", "KERNELLOOP_API_KEY", "KERNELLOOP_HOME"):
        monkeypatch.delenv(name, raising=False)


@dataclass
class Outcome:
    attempts: list[FakeAttempt]
    tokens: Usage | None = field(default=None)


def _cells(html: str) -> str:
    """report.html with no whitespace between tags (markdown-it puts each table cell on a line)."""
    return re.sub(r">\s+<", "><", html)


def usage(prompt: int, completion: int, reasoning: int, cost: float | None = None, calls: int = 1) -> Usage:
    return Usage(calls=calls, prompt_tokens=prompt, completion_tokens=completion, reasoning_tokens=reasoning,
                 cost_usd=cost)


def test_agent_tokens_are_summed_once_per_problem_and_divided_by_the_solved(tmp_path):
    suite = bench.Suite("s", "directory", write_problems(tmp_path / "suite", ["1_a", "2_b", "3_c"]))
    ran = {"1_a": usage(100, 40, 10, 0.001, calls=3), "2_b": usage(200, 80, 30, 0.002, calls=5),
           "3_c": usage(7, 3, 0, 0.0005)}

    def solve(problem, budget_s, device):
        if problem.name == "3_c":  # no attempt verified: its tokens still count
            return Outcome([], ran["3_c"])
        verdicts = [Verdict(status=Status.incorrect, reason="mismatch"),
                    Verdict(status=Status.correct if problem.name == "1_a" else Status.incorrect, reason="r")]
        return Outcome([FakeAttempt(v, 10.0 * i) for i, v in enumerate(verdicts)], ran[problem.name])

    result = run(suite, tmp_path / "out", bench.agent_work(solve, 60.0), mode=Mode.agent, budget_s=60.0)
    summary = result.summary
    assert summary.solved == 1
    assert (summary.tokens.calls, summary.tokens.prompt_tokens, summary.tokens.completion_tokens,
            summary.tokens.reasoning_tokens) == (9, 307, 123, 40)  # 2 attempts each, yet each run counted once
    assert summary.tokens.cost_usd == pytest.approx(0.0035)
    assert summary.tokens_per_solved == 430 and summary.tokens_note == ""
    assert [row.tokens.total_tokens for row in summary.per_problem] == [140, 280, 10]
    records = [json.loads(line) for line in result.results_path.read_text().splitlines()]
    assert [r["tokens"] is not None for r in records] == [True, False, True, False, True]  # first record of a job

    report = result.files.report_md.read_text()
    assert "| 9 | 307 | 123 | 40 | 430 | 430 | $0.0035 |" in report
    assert "| 2_b | no | incorrect | 2 | - | - | - | 280 | mismatch |" in report  # the per-problem tokens column
    assert "<td>430</td><td>430</td><td>$0.0035</td>" in _cells(result.files.report_html.read_text())
    assert json.loads(result.files.summary_json.read_text())["tokens"]["prompt_tokens"] == 307

    again = run(suite, tmp_path / "out", bench.agent_work(solve, 60.0), mode=Mode.agent, budget_s=60.0)
    assert again.ran == 0 and again.summary.tokens == summary.tokens  # resumed from results.jsonl, not doubled


def test_agent_run_with_nothing_solved_says_so_instead_of_dividing(tmp_path):
    suite = bench.Suite("s", "directory", write_problems(tmp_path / "suite", ["1_a"]))
    solve = lambda problem, budget_s, device: Outcome([], usage(50, 20, 5))  # noqa: E731
    result = run(suite, tmp_path / "out", bench.agent_work(solve, 60.0), mode=Mode.agent, budget_s=60.0)
    assert result.summary.tokens.total_tokens == 70
    assert (result.summary.tokens_per_solved, result.summary.tokens_note) == (None, "no problem solved")
    assert "| 1 | 50 | 20 | 5 | 70 | no problem solved | no prices given |" in result.files.report_md.read_text()


def test_a_cost_is_given_only_when_every_run_was_priced():
    assert add_usage([usage(1, 1, 0, 0.5), usage(1, 1, 0, None)]).cost_usd is None
    assert add_usage([usage(1, 1, 0, 0.5), usage(1, 1, 0, 0.25)]).cost_usd == 0.75
    assert add_usage([None, None]) is None


def test_scoring_given_candidates_says_no_model_calls_everywhere(tmp_path, monkeypatch):
    write_problems(tmp_path / "suite", ["1_a", "2_b"])
    cands = tmp_path / "cands"
    write_candidate(cands / "1_a.py", "correct")
    write_candidate(cands / "2_b.py", "incorrect")
    from tests.evals.test_bench import ScriptedVerifier as ScoringVerifier

    monkeypatch.setattr("kernelloop.cli.bench_cmd._verifier_factory", lambda pool: lambda d: ScoringVerifier(d, {}))
    result = runner.invoke(app, ["bench", str(tmp_path / "suite"), "--candidates", str(cands), "--device", "cpu",
                                 "--out", str(tmp_path / "out"), "--no-progress", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert (summary["tokens"], summary["tokens_per_solved"], summary["tokens_note"]) == (None, None, "no model calls")
    assert "tokens: no model calls" in result.output
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Tokens\n\nNo model calls.\n" in report and "| tokens |" not in report
    assert "<p>No model calls.</p>" in (tmp_path / "out" / "report.html").read_text()


def test_bad_prices_are_a_usage_error(tmp_path):
    result = runner.invoke(app, ["bench", str(tmp_path), "--prices", "cheap"])
    assert result.exit_code == 2 and "--prices" in result.output and "PROMPT,COMPLETION" in result.output


# --------------------------------------------------------------------------- end to end, over HTTP

CANDIDATES = 4  # bench runs the loop with the defaults: 4 coders a round, 8 rounds at most
ROUNDS = 8


def asks(problem: str, text: str):
    return lambda messages: f"({problem})" in messages[-1]["content"] and text in messages[-1]["content"]


def metered_script() -> list[Reply]:
    """1_alpha is solved in round 1 (planner + 4 coders); 2_beta never is (planner + 8 rounds of 4 coders).
    Every call reports its own counts, so a total is right only if each one is added exactly once."""
    script, n = [], 0
    for problem, rounds, kernel in (("1_alpha", 1, FIXED_KERNEL), ("2_beta", ROUNDS, WRONG_KERNEL)):
        turns = [("You are planning", PLAN_REPLY)] + [(f"candidate {c} of {CANDIDATES} in round {r}.", coder_reply(kernel))
                                                      for r in range(1, rounds + 1) for c in range(1, CANDIDATES + 1)]
        for text, reply in turns:
            n += 1
            script.append(Reply(reply, reasoning="...", place="think" if n % 2 else "reasoning_content",
                                prompt_tokens=1000 + 17 * n, completion_tokens=300 + 5 * n, reasoning_tokens=100 + n,
                                when=asks(problem, text)))
    return script


class ScriptedPool:
    """The bench's pool over tests.graph's ScriptedVerifier: tl.maximum is correct at 1.5x, else a mismatch."""

    device, slots = "cpu", ["cpu"]

    def __init__(self):
        self.verifier = ScriptedVerifier()

    def verify(self, candidate, problem, time_left_s=None):
        return self.verifier.verify(candidate, problem)

    def close(self):
        pass


def test_bench_over_http_totals_exactly_what_the_server_reported(tmp_path, monkeypatch):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("1_alpha", "2_beta"):
        shutil.copy(RELU_PROBLEM, suite / f"{name}.py")
    monkeypatch.setattr("kernelloop.cli.bench_cmd._open_pool", lambda device, ray, workspace, *options: ScriptedPool())
    script = metered_script()
    prompt, completion, reasoning = (sum(getattr(r, f"{k}_tokens") for r in script)
                                     for k in ("prompt", "completion", "reasoning"))
    with FakeOpenAIServer(list(script), model="fake-r1") as server:
        result = runner.invoke(app, ["bench", str(suite), "--device", "cpu", "--workspace", str(tmp_path / "ws"),
                                     "--out", str(tmp_path / "out"), "--base-url", server.url, "--model", server.model,
                                     "--api-key", "test", "--prices", "0.5,2", "--no-progress", "--json"])
        assert result.exit_code == 0, result.output
        assert server.unserved == 0 and len(server.chat_requests) == len(script) == 2 + CANDIDATES * (1 + ROUNDS)

    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["mode"] == "agent" and summary["solved"] == 1 and summary["problems"] == 2
    tokens = summary["tokens"]
    assert (tokens["calls"], tokens["prompt_tokens"], tokens["completion_tokens"], tokens["reasoning_tokens"]) == \
        (len(script), prompt, completion, reasoning)
    assert tokens["cost_usd"] == pytest.approx((prompt * 0.5 + completion * 2) / 1e6)
    assert summary["tokens_per_solved"] == prompt + completion  # every problem's tokens over the one solved
    rows = {row["problem"]: row for row in summary["per_problem"]}
    assert rows["1_alpha"]["solved"] and rows["1_alpha"]["tokens"]["calls"] == 1 + CANDIDATES
    assert not rows["2_beta"]["solved"] and rows["2_beta"]["tokens"]["calls"] == 1 + CANDIDATES * ROUNDS

    # The same figures in every place bench writes them.
    total = f"{prompt + completion:,}"
    assert f"tokens: {total} over {len(script)} model calls" in result.output  # the console
    assert f"per solved problem: {total}" in result.output
    report = (tmp_path / "out" / "report.md").read_text()
    cost = f"${(prompt * 0.5 + completion * 2) / 1e6:.4f}"
    assert f"| {len(script)} | {prompt:,} | {completion:,} | {reasoning:,} | {total} | {total} | {cost} |" in report
    assert f"<td>{total}</td><td>{total}</td><td>{cost}</td>" in _cells((tmp_path / "out" / "report.html").read_text())
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["tokens"] == tokens
    # and each run's own result.json agrees with its problem's row
    for path in (tmp_path / "ws" / "runs").glob("*/result.json"):
        record = json.loads(path.read_text())
        assert rows[record["problem"]]["tokens"]["prompt_tokens"] == sum(t["prompt_tokens"]
                                                                         for t in record["tokens_by_turn"])
