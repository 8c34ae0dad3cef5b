"""/docs/: the pages of docs/ rendered for anyone (no login, even before the first account exists), their
relative links and anchors as MkDocs makes them, and nothing served from outside the docs folder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client
from django.test.utils import override_settings

from webapp.core import docs_site

pytestmark = pytest.mark.django_db
DOCS = docs_site.docs_dir()


def test_the_index_is_served_to_anyone_before_any_account_exists() -> None:
    response = Client().get("/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert '<h1 id="mooncake">Mooncake</h1>' in html
    assert 'href="getting-started/install.md"' in html  # relative links, as the files have them
    assert 'href="/docs/"' in html  # the footer's link, on every page
    assert 'href="/docs/configuration/models.md"' in html  # the sidebar: mkdocs.yml's nav
    assert "<script>" not in html


def test_every_page_renders_with_the_anchors_its_links_name() -> None:
    client = Client()
    ids: dict[str, set[str]] = {}
    for path in sorted(DOCS.rglob("*.md")):
        page = str(path.relative_to(DOCS))
        response = client.get(f"/docs/{page}")
        assert response.status_code == 200, page
        ids[page] = set(re.findall(r'<h[1-6] id="([^"]+)"', response.content.decode()))
    # The anchors these pages link to are the ones MkDocs gives the headings, so they work here too.
    assert "how-values-resolve" in ids["configuration/index.md"]
    assert "engines-started-for-you-vllm-sglang-tgi" in ids["configuration/engines.md"]
    assert "several-models-modelmodels" in ids["configuration/models.md"]


def test_images_are_served_with_their_type() -> None:
    response = Client().get("/docs/screenshots/chat-light.png")
    assert response.status_code == 200 and response["Content-Type"] == "image/png"


def test_a_folder_url_serves_its_index_and_unknown_pages_are_404() -> None:
    client = Client()
    assert client.get("/docs/configuration/").status_code == 200
    assert client.get("/docs/no-such-page.md").status_code == 404
    assert client.get("/docs/configuration").status_code == 404


@pytest.mark.parametrize(
    "url",
    [
        "/docs/../pyproject.toml",
        "/docs/%2e%2e/secret.md",
        "/docs/..%2Fsecret.md",
        "/docs/sub/..%2F..%2Fsecret.md",
        "/docs/.hidden.md",
        "/docs/notes.txt",
        "/docs/link.md",
    ],
)
def test_nothing_outside_the_docs_folder_is_served(tmp_path: Path, url: str) -> None:
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "index.md").write_text("# Home\n", encoding="utf-8")
    (docs / ".hidden.md").write_text("# hidden\n", encoding="utf-8")
    (docs / "notes.txt").write_text("notes\n", encoding="utf-8")
    (tmp_path / "secret.md").write_text("# Outside\n\nnot for the web\n", encoding="utf-8")
    (docs / "link.md").symlink_to(tmp_path / "secret.md")
    with override_settings(MOONCAKE_DOCS_DIR=docs):
        client = Client()
        assert client.get("/docs/").status_code == 200
        response = client.get(url)
    assert response.status_code == 404, url
    assert b"not for the web" not in response.content


def test_headings_get_mkdocs_ids() -> None:
    assert (
        docs_site.slugify("Engines started for you: vllm, sglang, tgi")
        == "engines-started-for-you-vllm-sglang-tgi"
    )
    assert docs_site.slugify("What is invariant on which CPU") == "what-is-invariant-on-which-cpu"
    assert docs_site.slugify("Several models: model.models") == "several-models-modelmodels"
