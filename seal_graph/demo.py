"""`seal-graph demo`: one tool-using exchange against the served model, shown in full.

It exercises the whole serving path a rollout uses: the chat template renders the tool,
vLLM's hermes parser returns a structured tool call, a real LangChain tool executes it,
the result goes back to the model, and every completion carries its served token ids.
"""

from __future__ import annotations

import time

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from rich.console import Console
from rich.table import Table

from seal_graph.client import served_tokens
from seal_graph.serving import ModelEndpoint


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers and return the product."""
    return a * b


def run_demo(endpoint: ModelEndpoint, console: Console) -> list[BaseMessage]:
    """Ask for a product, force one tool call, execute it, and let the model answer."""
    llm = endpoint.chat_model(temperature=0.0, max_tokens=128, return_token_ids=True)
    messages: list[BaseMessage] = [
        SystemMessage("You are a careful assistant. Use the tools to compute."),
        HumanMessage("What is 17 times 23?"),
    ]
    stats = Table("step", "served tokens", "seconds", "tokens/s", title="served completions")
    began = time.perf_counter()

    def call(step: str, **bind: object) -> BaseMessage:
        start = time.perf_counter()
        reply = llm.bind_tools([multiply], **bind).invoke(messages)
        seconds = time.perf_counter() - start
        tokens = served_tokens(reply)
        count = len(tokens.completion_token_ids) if tokens else 0
        stats.add_row(step, str(count), f"{seconds:.2f}", f"{count / seconds:.1f}")
        messages.append(reply)
        return reply

    first = call("tool call", tool_choice="required")
    for tool_call in first.tool_calls:
        messages.append(multiply.invoke(tool_call))
    call("answer")

    console.rule(f"demo: '{endpoint.model}' at {endpoint.base_url}")
    for message in messages:
        text = message.content or ""
        calls = getattr(message, "tool_calls", None)
        if calls:
            text = f"{text} -> " + ", ".join(f"{c['name']}({c['args']})" for c in calls)
        console.print(f"[bold]{message.type:>6}[/]: {text}", highlight=False)
    console.print(stats)
    console.print(f"total {time.perf_counter() - began:.1f} s")
    return messages
