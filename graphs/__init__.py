"""LangGraph graphs (installed as `seal_graph.graphs`); `langgraph.json` names their modules."""
