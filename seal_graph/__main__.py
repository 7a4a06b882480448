"""`python -m seal_graph` runs the CLI."""

from seal_graph.cli import app

app(prog_name="seal-graph")
