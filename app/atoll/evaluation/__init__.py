"""Evaluation: the typed context an objective sees, calling an objective (failures become
data) under ``search.eval_timeout``, the evaluator a worker runs with its failure agreement, the
meeting of a worker's ranks before each collective ``ctx`` call, the check that the pruning
metric is reported, and the worker's torch process group.
"""
