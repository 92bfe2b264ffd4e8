"""Accounting (C1-C3): pricing, periods, reports and budgets over the usage ledger.

The ledger itself is kept by the controller in the store (``state.usage``); this package is
the pure part: what a GPU-hour costs, where periods start, how idle cost is shared.
"""
