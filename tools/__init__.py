"""Training environments built from LangChain tools (installed as `seal_graph.tools`)."""
