"""Schedulers: which evaluations go on, from their per-epoch curves (beside the engine)."""

from atoll.scheduling.asha import Asha
from atoll.scheduling.base import Scheduler, Verdict
from atoll.scheduling.halving import SuccessiveHalving
from atoll.scheduling.median import MedianRule

__all__ = ["Asha", "MedianRule", "Scheduler", "SuccessiveHalving", "Verdict"]
