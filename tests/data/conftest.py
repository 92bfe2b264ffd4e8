from support.apikit import api  # noqa: F401  (the fixture)
