"""What people use to see and steer queues: inspection (runners, queues, periodic records),
pages of a state's tasks (browsing), dead tasks, bulk actions, counters and stats, the
Prometheus metrics, and pausing and limiting a queue at run time (queue_control.py). The
CLI and the dashboard read and act only through these. See docs/architecture.md.
"""
