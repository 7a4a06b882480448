"""Runners: what drives the graphs over many tasks — rollout batches (`rollouts`),
evaluation (`evaluation`) and the demo. They sit above the graphs and below training."""
