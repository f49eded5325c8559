"""Slurm suite: real munged, slurmctld and slurmd per fake node, configuration rendered from the model."""
