"""Interactive runs pause at reviews; the thread says where it waits (`get_state(thread).next`)."""

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from kernelloop.graph.build import build_graph
from kernelloop.graph.context import Context
from kernelloop.graph.state import RunSettings
from kernelloop.problem import Problem
from kernelloop.serve.runs import solve
from tests.graph.scripted import RELU_PROBLEM, ScriptedChatClient, ScriptedVerifier


def start(tmp_path, client, **settings):
    graph = build_graph(InMemorySaver())
    thread = {"configurable": {"thread_id": "interactive"}}
    context = Context(chat_client=client, verifier=ScriptedVerifier(), workspace=tmp_path)
    problem = Problem.from_file(RELU_PROBLEM)
    state = {"problem": {"name": problem.name, "path": str(problem.path), "source": problem.source,
                         "sha256": problem.sha256},
             "settings": RunSettings(candidates=2, interactive=True, **settings).model_dump()}
    graph.invoke(state, thread, context=context)
    return graph, thread, context


def test_the_run_waits_for_the_plan_review_then_for_the_round_review(tmp_path):
    client = ScriptedChatClient()
    graph, thread, context = start(tmp_path, client)
    waiting = graph.get_state(thread)
    assert waiting.next == ("review_plan",)
    assert waiting.tasks[0].interrupts[0].value["kind"] == "plan"
    assert not any(key.startswith("coder/") for key in client.calls)

    graph.invoke(Command(resume={"action": "edit", "plan": "MY OWN PLAN: one masked pass"}), thread, context=context)
    assert graph.get_state(thread).next == ("review_round",)
    assert "MY OWN PLAN: one masked pass" in client.prompts["coder/r1c0"]
    assert graph.get_state(thread).values["round"] == 1

    graph.invoke(Command(resume={"action": "continue", "hint": "use tl.maximum"}), thread, context=context)
    done = graph.get_state(thread)
    assert done.next == ()
    assert "- use tl.maximum" in client.prompts["coder/r2c1"]
    assert (done.values["stop_reason"], done.values["best_id"]) == ("target_met", "r2c0")


def test_stopping_at_a_review_finalizes_with_the_best_so_far(tmp_path):
    graph, thread, context = start(tmp_path, ScriptedChatClient())
    graph.invoke(Command(resume={"action": "approve"}), thread, context=context)
    graph.invoke(Command(resume={"action": "stop"}), thread, context=context)
    done = graph.get_state(thread)
    assert done.next == ()
    assert (done.values["stop_reason"], done.values["status"], done.values["round"]) == ("stopped_by_user", "finished", 1)
    best = done.values["best_id"]  # round 1's closest attempt, kept with the run; not correct: no best_kernel.py
    assert best and (tmp_path / "runs" / "interactive" / "kernels" / f"{best}.py").is_file()
    assert not (tmp_path / "runs" / "interactive" / "best_kernel.py").exists()


def test_stopping_at_the_plan_writes_no_kernel(tmp_path):
    client = ScriptedChatClient()
    graph, thread, context = start(tmp_path, client)
    graph.invoke(Command(resume={"action": "stop"}), thread, context=context)
    assert graph.get_state(thread).values["stop_reason"] == "stopped_by_user"
    assert client.calls == ["planner/plan"]


def test_solve_without_anyone_to_answer_pauses_and_says_so(tmp_path):
    result = solve(RELU_PROBLEM, chat_client=ScriptedChatClient(), verifier=ScriptedVerifier(), workspace=tmp_path,
                   candidates=1, interactive=True, analyze=lambda problem: None)
    assert (result.run_status, result.stop_reason, result.attempts) == ("waiting", "waiting for review", 0)


def test_solve_passes_reviews_to_on_review(tmp_path):
    seen = []

    def answer(payload):
        seen.append(payload["kind"])
        return {"action": "approve"} if payload["kind"] == "plan" else {"action": "continue", "hint": "mask it"}

    client = ScriptedChatClient()
    result = solve(RELU_PROBLEM, chat_client=client, verifier=ScriptedVerifier(), workspace=tmp_path,
                   candidates=1, interactive=True, on_review=answer, analyze=lambda problem: None)
    assert seen == ["plan", "round"]
    assert result.stop_reason == "target_met"
    assert "- mask it" in client.prompts["coder/r2c0"]
