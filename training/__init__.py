"""Trainers and weight sync (installed as `seal_graph.training`); needs the `train` extra."""
