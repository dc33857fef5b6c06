"""The secret values given to the process, scrubbed by value (tailwise.credentials)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tailwise import credentials as c


@pytest.fixture(autouse=True)
def empty() -> Iterator[None]:
    c.forget_all()
    yield
    c.forget_all()


def test_only_credentials_are_recorded_and_scrubbed_by_value() -> None:
    c.remember_header("Content-Type", "application/json")  # not a credential by name
    c.remember_header("X-Api-Key", "EMPTY")  # too short to be one: not scrubbed
    assert not c.known()
    c.remember_header("Authorization", "Bearer tok-123456789")
    c.remember_header("X-Custom", "Basic dXNlcjpwYXNzd29yZA==")  # a credential by its form
    c.remember_url("http://user1234:pw-9876543@h:1/m?token=qs-55555555&model=llama-70b-x")
    text = "tok-123456789 user1234 pw-9876543 qs-55555555 llama-70b-x dXNlcjpwYXNzd29yZA=="
    assert c.scrub(text) == "*** *** *** *** llama-70b-x ***"
    assert c.scrub("Authorization: Bearer tok-123456789") == "Authorization: ***"


def test_a_url_is_shown_without_its_credentials() -> None:
    assert c.masked_url("http://u:p@h:1/m?token=x&a=b") == "http://h:1/m?token=***&a=***"
    assert c.masked_url("https://[::1]:8443/metrics") == "https://[::1]:8443/metrics"
