"""The console a training run prints its stage lines and progress bars to (stderr), in a
module of its own so that the run can print before the training stack is imported."""

from rich.console import Console

console = Console(stderr=True)
