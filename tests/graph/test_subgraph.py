"""build_graph() embedded as one node of a parent LangGraph graph: the parent's checkpointer applies
to the kernelloop subgraph (its steps are checkpointed under the parent's thread, and an interrupt
inside it pauses and resumes through the parent), and the run goes to its end."""

from __future__ import annotations

import json
from pathlib import Path

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command
from typing_extensions import TypedDict

from kernelloop.graph.build import build_graph
from kernelloop.graph.context import Context
from kernelloop.problem import Problem
from tests.graph.scripted import FIXED_KERNEL, RELU_PROBLEM, ScriptedChatClient, ScriptedVerifier


class ParentState(TypedDict, total=False):
    """A parent agent's state; the keys it shares with kernelloop's State pass in and out of the subgraph."""

    request: str  # the parent's own: a problem file to optimize
    interactive: bool
    problem: dict
    settings: dict
    hints: list[str]
    best_id: str | None
    stop_reason: str | None
    announcement: str


def prepare(state: ParentState) -> dict:
    problem = Problem.from_file(state["request"])
    return {"problem": {"name": problem.name, "path": str(problem.path), "source": problem.source,
                        "sha256": problem.sha256},
            "settings": {"candidates": 2, "target_speedup": 1.2, "interactive": state.get("interactive", False)},
            "hints": ["mask the tail"]}


def announce(state: ParentState) -> dict:
    return {"announcement": f"best {state['best_id']}: {state['stop_reason']}"}


def parent_graph(saver: InMemorySaver):
    builder = StateGraph(ParentState, context_schema=Context)
    builder.add_node("prepare", prepare)
    builder.add_node("kernelloop", build_graph())  # compiled without a checkpointer: the parent's applies
    builder.add_node("announce", announce)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "kernelloop")
    builder.add_edge("kernelloop", "announce")
    builder.add_edge("announce", END)
    return builder.compile(checkpointer=saver)


def context(tmp_path: Path, verifier: ScriptedVerifier) -> Context:
    return Context(chat_client=ScriptedChatClient(), verifier=verifier, workspace=tmp_path, analyze=lambda p: None)


def test_the_graph_runs_to_its_end_as_a_node_of_a_parent(tmp_path):
    saver, verifier = InMemorySaver(), ScriptedVerifier()
    graph = parent_graph(saver)
    config = {"configurable": {"thread_id": "parent-1"}}
    out = graph.invoke({"request": str(RELU_PROBLEM)}, config, context=context(tmp_path, verifier))
    assert out["announcement"] == "best r2c0: target_met"
    assert verifier.calls == ["r1c0", "r1c1", "r2c0", "r2c1"]
    namespaces = {c.config["configurable"]["checkpoint_ns"] for c in saver.list(None)}
    assert "" in namespaces and any(ns.startswith("kernelloop:") for ns in namespaces)  # the subgraph's steps
    assert graph.get_state(config).next == ()
    run = tmp_path / "runs" / "parent-1"  # the run dir is named by the parent's thread
    assert (run / "best_kernel.py").read_text() == FIXED_KERNEL and (run / "report.md").is_file()


def test_an_interrupt_inside_pauses_and_resumes_through_the_parent(tmp_path):
    saver, verifier = InMemorySaver(), ScriptedVerifier()
    graph = parent_graph(saver)
    config = {"configurable": {"thread_id": "parent-2"}}
    graph.invoke({"request": str(RELU_PROBLEM), "interactive": True}, config, context=context(tmp_path, verifier))
    paused = graph.get_state(config, subgraphs=True)
    assert paused.next == ("kernelloop",)
    inner = paused.tasks[0].state
    assert inner.next == ("review_plan",) and paused.tasks[0].interrupts[0].value["kind"] == "plan"
    assert verifier.calls == []

    resumed = graph.invoke(Command(resume={"action": "approve"}), config, context=context(tmp_path, verifier))
    while "announcement" not in resumed:  # the review between rounds: go on
        assert graph.get_state(config, subgraphs=True).tasks[0].interrupts[0].value["kind"] == "round"
        resumed = graph.invoke(Command(resume={"action": "continue"}), config, context=context(tmp_path, verifier))
    assert resumed["announcement"] == "best r2c0: target_met"
    assert verifier.calls == ["r1c0", "r1c1", "r2c0", "r2c1"]


def test_a_parent_passes_its_own_langchain_chat_model(tmp_path):
    """The model is whatever LangChain chat model the embedding agent already has (here LangChain's fake)."""
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage

    from tests.graph.scripted import PLAN_REPLY, coder_reply

    def reply(text: str, tokens: tuple[int, int]) -> AIMessage:
        return AIMessage(f"<think>hmm</think>{text}", usage_metadata={
            "input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": sum(tokens)})

    kernel = reply(coder_reply(FIXED_KERNEL), (90, 30))
    theirs = FakeMessagesListChatModel(responses=[reply(PLAN_REPLY, (40, 10)), kernel, kernel])  # plan, 2 coders
    graph = parent_graph(InMemorySaver())
    config = {"configurable": {"thread_id": "parent-3"}}
    out = graph.invoke({"request": str(RELU_PROBLEM)}, config,
                       context=Context(chat_client=theirs, verifier=ScriptedVerifier(), workspace=tmp_path,
                                       analyze=lambda p: None))
    assert out["announcement"] == "best r1c0: target_met"
    result = json.loads((tmp_path / "runs" / "parent-3" / "result.json").read_text())
    assert (result["tokens"]["prompt_tokens"], result["tokens"]["completion_tokens"]) == (40 + 90 + 90, 10 + 30 + 30)
    assert {a["id"]: a["verdict"]["status"] for a in result["attempt_list"]} == {"r1c0": "correct", "r1c1": "correct"}
