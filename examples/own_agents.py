"""Two LangGraph agents as their authors wrote them, trained by seal-graph unchanged.

    seal-graph train --agent examples.own_agents:react_agent --env kv-calc --out runs/mine
    seal-graph train --agent examples.own_agents:planner_agent --env kv-calc

Each factory takes the chat model and the tools seal-graph gives for a user turn (the
served policy, with token ids; the environment's tools as the training-time interface
shows them) and returns the agent, a graph over `{"messages": [...]}`. Nothing in them
knows about seal-graph.
"""

from __future__ import annotations

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


def react_agent(model: BaseChatModel, tools: list[BaseTool]):
    """LangChain's prebuilt tool-calling agent."""
    return create_agent(model, tools)


def planner_agent(model: BaseChatModel, tools: list[BaseTool]):
    """A hand-built StateGraph: a planner node picks the next tool calls (or answers),
    a ToolNode runs them, and the planner sees their results."""
    planner = model.bind_tools(tools) if tools else model

    async def plan(state: MessagesState) -> dict:
        return {"messages": [await planner.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("planner", plan)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "planner")
    graph.add_conditional_edges("planner", tools_condition)
    graph.add_edge("tools", "planner")
    return graph.compile(name="planner")
