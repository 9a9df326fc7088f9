"""Read-only views of a run for people: they read the HDF5 files only (no MPI, no torch) and
work while a search is running.
"""
