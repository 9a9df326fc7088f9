"""The engine: the asynchronous island loop, the message protocol between worker leaders,
the population a leader knows, the worker's hand-over to its ranks, stopping, and the rank
layout. Everything here speaks MPI; the search logic it calls (space, evolution) does not.
"""
