"""The producer's side: what a user declares and sends. Job classes and their registry,
params and results as JSON (serialization.py, codecs.py), the limits a job declares
(limits.py), enqueue, the Task handle, a running task's progress, and periodic jobs.
Nothing here imports the runner or the operations (tests/test_style.py keeps it so); see
docs/architecture.md.
"""
