"""Team data: storage roots, job input/output paths, per-job grants, redaction (DESIGN §8)."""
