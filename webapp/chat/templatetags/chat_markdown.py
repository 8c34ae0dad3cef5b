from django import template
from django.utils.safestring import SafeString, mark_safe

from webapp.chat.markdown import render_markdown

register = template.Library()


@register.filter(name="markdown")
def markdown_filter(text: str) -> SafeString:
    """Model output as sanitized HTML (render_markdown escapes raw HTML and sanitizes the result)."""
    return mark_safe(render_markdown(text or ""))  # sanitized by nh3 in render_markdown
