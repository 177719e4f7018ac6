"""Workflows: tasks with dependencies, enqueued as one run that always ends
(docs/workflows.md)."""
