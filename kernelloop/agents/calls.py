"""How agents make one model call, whichever kind of model they were given.

`ask` sends to a keyed client by key (a recording, a scripted test model) or through any
LangChain chat model (llm.call_model); `Asking` makes a chat model a keyed client, the live
fallback a replay hands the turns it can't serve. Kept apart from turns.py (the records) so the
model layer (llm.py) imports the records and this imports the model layer: no cycle.
"""

from __future__ import annotations

from kernelloop.agents.turns import ChatModel, KeyedChatClient, Message, ModelTurn


def ask(model: ChatModel, key: str, messages: list[Message]) -> ModelTurn:
    """One model call: by key for a keyed client, else through the LangChain chat model.

    The returned turn carries the messages sent (R1's: system text folded into the first user message).
    """
    from kernelloop.agents.llm import call_model, to_r1_messages  # lazy: langchain loads only for live calls

    wire = [Message(**m) for m in to_r1_messages(messages)]
    if isinstance(model, KeyedChatClient):
        turn = model.complete_keyed(key, wire)
    else:
        turn = call_model(model, wire)
    return turn if turn.messages else turn.model_copy(update={"messages": wire})


class Asking:
    """A LangChain chat model as a keyed client: what a replay asks for the turns it can't serve."""

    def __init__(self, model: ChatModel):
        self.model = model
        self.model_name = str(getattr(model, "model_name", None) or type(model).__name__)

    def complete_keyed(self, key: str, messages: list[Message]) -> ModelTurn:
        return ask(self.model, key, messages)
