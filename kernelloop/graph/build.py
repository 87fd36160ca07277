"""The kernelloop state machine, top to bottom:

    START -> planner -> review_plan -> coder x N (Send, in parallel) -> verifier -> critic -> route
    review_plan -> warm_start -> verifier -> critic -> route   (a start kernel: attempt 0, round 0)
    route: target met | budget spent | rounds exhausted | stopped -> finalize -> END
           interactive -> review_round -> coder x N | finalize
           else -> coder x N

review_plan passes straight through unless the run is interactive. Routing functions live in
routing.py (pure); nodes in nodes.py. `graph` at the bottom is what langgraph.json exports
(LangGraph Server brings its own checkpointer); `build_graph(checkpointer)` is for everything else.
"""

from __future__ import annotations

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from kernelloop.graph import nodes, routing
from kernelloop.graph.context import Context
from kernelloop.graph.state import InputState, State

NAME = "kernelloop"


def build_graph(checkpointer: BaseCheckpointSaver | None = None) -> CompiledStateGraph[State, Context, InputState, State]:
    """The compiled graph; pass a checkpointer for anything that should survive the process."""
    builder = StateGraph(State, context_schema=Context, input_schema=InputState)
    builder.add_node("planner", nodes.planner)
    builder.add_node("review_plan", nodes.review_plan)
    builder.add_node("warm_start", nodes.warm_start)
    # The stubs want a schema-typed node input, but a Send target gets its payload as sent (here a
    # CoderBrief as a JSON dict); typing `brief` as a schema would make LangGraph coerce it.
    builder.add_node("coder", nodes.coder)  # type: ignore[call-overload]
    builder.add_node("verifier", nodes.verifier)
    builder.add_node("critic", nodes.critic)
    builder.add_node("review_round", nodes.review_round)
    builder.add_node("finalize", nodes.finalize)

    builder.add_edge(START, "planner")
    builder.add_edge("planner", "review_plan")
    builder.add_conditional_edges("review_plan", routing.after_plan_review, ["coder", "warm_start", "finalize"])
    builder.add_edge("warm_start", "verifier")
    builder.add_edge("coder", "verifier")  # fan-in: the verifier runs once all of the round's coders are done
    builder.add_edge("verifier", "critic")
    builder.add_conditional_edges("critic", routing.after_critic, ["coder", "review_round", "finalize"])
    builder.add_conditional_edges("review_round", routing.after_round_review, ["coder", "finalize"])
    builder.add_edge("finalize", END)
    return builder.compile(checkpointer=checkpointer, name=NAME)


graph = build_graph()
