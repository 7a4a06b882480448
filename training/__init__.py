"""Trainers and weight sync (installed as `seal_graph.training`); needs the `train` extra."""

import warnings

# TRL checks the installed vLLM against the versions its own vLLM integration supports.
# seal-graph talks to vLLM over HTTP only and never uses that integration.
warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions")
