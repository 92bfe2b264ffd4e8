"""The REST API (FastAPI): authn → authz → service → store. Routes hold no logic."""
