"""Slurm over the fake nodes: configuration rendered from the model (render), the daemons (cluster), and what a job
sees from inside (probe). See docs/scheduler.md."""
