"""Self-service API tokens: mint, list and revoke one's own through the API."""

from __future__ import annotations

from support.apikit import Api


def mint(api: Api, user: str, **body: object) -> dict[str, object]:
    response = api.client.post("/v1/tokens", json=body, headers=api.as_(user))
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_a_minted_token_works_lists_without_its_secret_and_stops_when_revoked(api: Api) -> None:
    made = mint(api, "alice", description="laptop", ttl_days=7)
    bearer = {"Authorization": f"Bearer {made['token']}"}
    assert api.client.get("/v1/whoami", headers=bearer).json()["user"] == "alice"
    assert made["expires_at"] is not None and made["description"] == "laptop"

    listed = api.client.get("/v1/tokens", headers=api.as_("alice")).json()["items"]
    mine = [t for t in listed if t["id"] == made["id"]]
    assert len(mine) == 1 and "token" not in mine[0]
    assert str(made["token"]).split("_", 2)[2] not in str(listed)

    # The printed form is what users have at hand; the API takes the id.
    revoked = api.client.delete(f"/v1/tokens/{made['id']}", headers=bearer)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    refused = api.client.get("/v1/whoami", headers=bearer)
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]


def test_another_users_token_is_unknown_to_them_but_not_to_a_platform_admin(api: Api) -> None:
    made = mint(api, "alice")
    other = api.client.delete(f"/v1/tokens/{made['id']}", headers=api.as_("bob"))
    assert other.status_code == 404
    assert (
        api.client.get("/v1/tokens", params={"user": "alice"}, headers=api.as_("bob")).status_code
        == 403
    )
    seen = api.client.get("/v1/tokens", params={"user": "alice"}, headers=api.as_("admin"))
    assert made["id"] in [t["id"] for t in seen.json()["items"]]
    assert (
        api.client.delete(f"/v1/tokens/{made['id']}", headers=api.as_("admin")).status_code == 200
    )


def test_a_token_made_through_the_api_always_expires_within_a_year(api: Api) -> None:
    too_long = api.client.post("/v1/tokens", json={"ttl_days": 366}, headers=api.as_("alice"))
    assert too_long.status_code == 422
    assert "ttl_days" in str(too_long.json()["error"]["details"])
    made = mint(api, "alice")
    assert made["expires_at"] is not None


def test_a_user_holds_at_most_fifty_active_tokens(api: Api) -> None:
    for _ in range(50 - len(api.client.get("/v1/tokens", headers=api.as_("vera")).json()["items"])):
        mint(api, "vera")
    refused = api.client.post("/v1/tokens", json={}, headers=api.as_("vera"))
    assert refused.status_code == 409 and "50 active" in refused.json()["error"]["message"]
