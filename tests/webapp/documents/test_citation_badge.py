"""A citation of a document the reply read whole says so in words, and why only a passage shows (issue #47:
an unexplained "whole document" badge)."""

from __future__ import annotations

from types import SimpleNamespace

from django.template.loader import render_to_string


def citation(*, whole: bool) -> SimpleNamespace:
    return SimpleNamespace(
        document_name="cakes.pdf", page=2, heading="", quote="Flour, eggs.", whole_document=whole
    )


def test_a_whole_document_citation_explains_itself() -> None:
    html = render_to_string("documents/_citations.html", {"citations": [citation(whole=True)]})
    assert ">read in full</span>" in html
    assert (
        "title=\"The whole document fit in the model's context, so the reply read all of it; the passage"
        in html
    )
    assert ">whole document<" not in html


def test_a_passage_citation_has_no_badge() -> None:
    html = render_to_string("documents/_citations.html", {"citations": [citation(whole=False)]})
    assert "read in full" not in html and "doc-cite-whole" not in html
