"""Per-job data grants: short-lived access scoped to one attempt's inputs and outputs (D2).

``base`` holds the value types and the scope rule, ``local``/``azure``/``s3`` mint grants for
each kind of team storage root, ``issuer`` picks the minter for a team.
"""
