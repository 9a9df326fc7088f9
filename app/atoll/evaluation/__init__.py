"""Evaluation: the typed context an objective sees, calling an objective (failures become
data), the evaluator a worker runs with its failure agreement, and the worker's torch process
group.
"""
