"""The documentation pages work offline and declare how to authenticate."""

from __future__ import annotations

import pytest

from support.apikit import Api


def test_the_docs_pages_load_their_files_from_the_server_not_a_cdn(api: Api) -> None:
    for page, files in {
        "/docs": ["/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css"],
        "/redoc": ["/docs/redoc.standalone.js"],
    }.items():
        html = api.client.get(page).text
        assert "cdn.jsdelivr.net" not in html and "fonts.googleapis.com" not in html
        for path in files:
            assert path in html


@pytest.mark.parametrize(
    ("path", "media_type", "start"),
    [
        ("/docs/swagger-ui-bundle.js", "text/javascript", b""),
        ("/docs/swagger-ui.css", "text/css", b""),
        ("/docs/redoc.standalone.js", "text/javascript", b""),
        ("/docs/favicon.png", "image/png", b"\x89PNG"),
    ],
)
def test_each_docs_file_is_served(api: Api, path: str, media_type: str, start: bytes) -> None:
    response = api.client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(media_type)
    assert len(response.content) > 1000 and response.content.startswith(start)


def test_the_openapi_document_declares_the_bearer_scheme_where_it_is_needed(api: Api) -> None:
    document = api.client.get("/openapi.json").json()
    scheme = document["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert document["paths"]["/v1/jobs"]["post"]["security"] == [{"bearer": []}]
    assert "security" not in document["paths"]["/healthz"]["get"]


def test_a_request_without_a_token_is_told_what_to_pass(api: Api) -> None:
    response = api.client.get("/v1/jobs")
    assert response.status_code == 401
    assert response.json()["error"]["message"] == (
        "missing bearer token; pass 'Authorization: Bearer <token>'"
    )
