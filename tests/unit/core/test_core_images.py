"""Image references and pools' allow-lists (core.images)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpupool.core.images import ImageProblem, check_reference, is_allowed


@dataclass(frozen=True)
class Ref:
    reference: str
    valid: bool


REFERENCES = [
    pytest.param(Ref("busybox", True), id="bare name"),
    pytest.param(Ref("localhost/gpupool-test/busybox:1", True), id="localhost with tag"),
    pytest.param(Ref("ghcr.io/acme/train:1.4", True), id="registry, path and tag"),
    pytest.param(Ref("registry.local:5000/team-a/x_y__z:latest", True), id="registry with port"),
    pytest.param(Ref("nvcr.io/nvidia/pytorch@sha256:" + "a" * 64, True), id="digest"),
    pytest.param(Ref("ghcr.io/acme/train:1.4@sha256:" + "0" * 64, True), id="tag and digest"),
    pytest.param(Ref("", False), id="empty"),
    pytest.param(Ref("Ghcr.io/Acme/Train", False), id="upper-case path"),
    pytest.param(Ref("--privileged", False), id="looks like a flag"),
    pytest.param(Ref("ghcr.io/acme/train:1.4 --net=host", False), id="space"),
    pytest.param(Ref("acme/train;rm -rf /", False), id="shell metacharacter"),
    pytest.param(Ref("acme/train:", False), id="empty tag"),
    pytest.param(Ref("acme//train", False), id="empty path component"),
    pytest.param(Ref("x" * 600, False), id="too long"),
]


@pytest.mark.parametrize("case", REFERENCES)
def test_image_reference(case: Ref) -> None:
    if case.valid:
        assert check_reference(case.reference) == case.reference
    else:
        with pytest.raises(ImageProblem):
            check_reference(case.reference)


@dataclass(frozen=True)
class Allow:
    reference: str
    patterns: tuple[str, ...]
    allowed: bool


ALLOW = [
    pytest.param(Allow("ghcr.io/acme/train:1", ("ghcr.io/acme/*",), True), id="glob of a repo"),
    pytest.param(Allow("ghcr.io/evil/x:1", ("ghcr.io/acme/*",), False), id="other repo"),
    pytest.param(Allow("ghcr.io/acme/train", ("ghcr.io/acme/*:*",), False), id="tags only"),
    pytest.param(Allow("localhost/x:1", ("ghcr.io/*", "localhost/*"), True), id="second pattern"),
    pytest.param(Allow("localhost/x:1", (), False), id="an empty list allows nothing"),
    pytest.param(Allow("LOCALHOST/x", ("localhost/*",), False), id="case-sensitive"),
]


@pytest.mark.parametrize("case", ALLOW)
def test_allowed_images(case: Allow) -> None:
    assert is_allowed(case.reference, case.patterns) is case.allowed
