"""Authentication (API tokens) and authorization (roles, the one check)."""
