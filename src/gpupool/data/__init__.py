"""Team data: storage roots, job input/output paths, per-job grants, redaction
(docs/architecture.md §8)."""
