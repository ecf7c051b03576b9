"""The test suite's helpers, which no library module imports: generated data (data.py), a disk to
fill (full_disk.py), damage done to a checkpoint (checkpoint_faults.py), a watchdog for tests that
could hang (watchdog.py), the `pytest --cpu-report` plugin (cpu_report.py) and `make test`'s
worker count (workers.py)."""
