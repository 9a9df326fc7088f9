"""One job of a search: plan it once on rank 0, begin it in the record, run every rank's role,
and close it (exit codes 0, 2 and 75).
"""
