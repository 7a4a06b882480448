"""BFCL v3 multi-turn as a seal-graph environment (needs `pip install --no-deps bfcl-eval`)."""
