"""The trace simulator (P5): real cluster traces replayed through the production scheduler.

``trace`` reads traces, ``cluster`` builds configurations and the compared policies,
``engine`` runs one policy on a virtual clock with the simulated (``fake``) backend,
``metrics`` and ``report`` turn the outcome into numbers, a CSV and an HTML report.
"""
