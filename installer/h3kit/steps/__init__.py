"""Workflow steps: the order in which commands call the domain packages (install's chain, the shared first steps)."""
