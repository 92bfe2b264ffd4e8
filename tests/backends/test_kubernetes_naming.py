"""Job names from attempt keys (``kubernetes/naming.py``): deterministic, DNS-1123 labels that
leave room for an Indexed Job's pod hostnames, and distinct for distinct keys."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.backends.kubernetes.naming import MAX_NAME, job_name

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")


@dataclass(frozen=True)
class Case:
    key: str
    prefix: str
    want: str


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(Case("j-42.1", "gpupool-", "gpupool-j-42-1-7c32fb673b"), id="plain key"),
        pytest.param(Case("J_Big.Run.2", "gpupool-", "gpupool-j-big-run-2-"), id="lower-cased"),
        pytest.param(Case("arr_7.1", "", "arr-7-1-"), id="no prefix"),
        pytest.param(Case("-.1", "", "1-"), id="leading punctuation dropped"),
        pytest.param(Case("x" * 80 + ".1", "gp-", "gp-" + "x" * 38 + "-"), id="long key cut"),
    ],
)
def test_names_read_like_their_keys(case: Case) -> None:
    name = job_name(case.key, case.prefix)
    assert name.startswith(case.want)
    assert DNS_LABEL.match(name) and len(name) <= MAX_NAME


def test_keys_differing_only_in_what_is_cut_or_folded_get_different_names() -> None:
    keys = ["Run.1", "run.1", "run_1.1", "run-1.1", "x" * 80 + "a.1", "x" * 80 + "b.1"]
    names = {job_name(k) for k in keys}
    assert len(names) == len(keys)


@given(st.text(alphabet="abcXYZ019._-", min_size=1, max_size=120), st.sampled_from(["", "gp-"]))
def test_every_key_gives_a_short_dns_label(key: str, prefix: str) -> None:
    name = job_name(key, prefix)
    assert DNS_LABEL.match(name), name
    assert len(name) <= MAX_NAME
    assert job_name(key, prefix) == name  # deterministic
