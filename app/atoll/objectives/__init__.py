"""Objectives: what one evaluation computes. See :mod:`atoll.objectives.loader`."""
