"""Documents people attach to chats or keep in collections, their indexed chunks, and replies' citations.

A document belongs to its owner and to exactly one home: a conversation (uploaded into that chat, deleted
with it) or one of the owner's collections. Collections, and single collection documents, are attached to
chats through Attachment rows. The original bytes live in the database, so a Celery worker on another
machine reads exactly what was uploaded and deleting a chat leaves no file behind.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.chat.models import Conversation, Message


class Collection(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="collections")
    name = models.CharField(max_length=120)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["owner", "name"], name="documents_collection_unique")]

    def __str__(self) -> str:
        return self.name


class Document(models.Model):
    class Kind(models.TextChoices):
        PDF = "pdf", "PDF"
        DOCX = "docx", "Word"
        MARKDOWN = "markdown", "Markdown"
        TEXT = "text", "Text"
        HTML = "html", "HTML"
        CODE = "code", "Code"

    class State(models.TextChoices):
        QUEUED = "queued"
        EXTRACTING = "extracting"
        READY = "ready"
        FAILED = "failed"

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="documents")
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, null=True, blank=True, related_name="documents"
    )
    collection = models.ForeignKey(
        Collection, on_delete=models.CASCADE, null=True, blank=True, related_name="documents"
    )
    name = models.CharField(max_length=255)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    size_bytes = models.PositiveIntegerField()
    data = models.BinaryField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    # Progress while extracting: units (pages, or 1 for a file without pages) done of total.
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    page_count = models.PositiveIntegerField(null=True, blank=True)
    char_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(conversation__isnull=True, collection__isnull=False)
                | models.Q(conversation__isnull=False, collection__isnull=True),
                name="documents_document_one_home",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_busy(self) -> bool:
        return self.state in (self.State.QUEUED, self.State.EXTRACTING)


class DocumentChunk(models.Model):
    """A passage of a document, with where it came from; SQLite's FTS5 table and PostgreSQL's full-text
    index (migration 0002) index its text."""

    document = models.ForeignKey(Document, on_delete=models.CASCADE, related_name="chunks")
    index = models.PositiveIntegerField()
    text = models.TextField()
    page = models.PositiveIntegerField(null=True, blank=True)
    heading = models.CharField(max_length=300, blank=True, default="")

    class Meta:
        ordering = ["document_id", "index"]
        constraints = [models.UniqueConstraint(fields=["document", "index"], name="documents_chunk_unique")]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.index}"


class ChunkEmbedding(models.Model):
    """A chunk's vector from the embedding model `model` (webapp.documents.vectors): float32 little-endian
    bytes, L2-normalised, so a dot product is the cosine. One per chunk: a change of model re-embeds."""

    chunk = models.OneToOneField(
        DocumentChunk, on_delete=models.CASCADE, primary_key=True, related_name="embedding"
    )
    model = models.CharField(max_length=200)
    vector = models.BinaryField()

    def __str__(self) -> str:
        return f"{self.chunk_id} ({self.model})"


class Attachment(models.Model):
    """A collection, or one collection document, attached to a chat (chat uploads need no row)."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="attachments")
    collection = models.ForeignKey(Collection, on_delete=models.CASCADE, null=True, blank=True)
    document = models.ForeignKey(Document, on_delete=models.CASCADE, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(collection__isnull=True, document__isnull=False)
                | models.Q(collection__isnull=False, document__isnull=True),
                name="documents_attachment_one_target",
            ),
            models.UniqueConstraint(
                fields=["conversation", "collection"], name="documents_attachment_collection_unique"
            ),
            models.UniqueConstraint(
                fields=["conversation", "document"], name="documents_attachment_document_unique"
            ),
        ]


class MessageCitation(models.Model):
    """A passage a reply's prompt held. The quote and place are copied: the citation still reads right
    after its document is deleted (it goes with the message, or with its chat)."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="document_citations_set")
    document = models.ForeignKey(Document, on_delete=models.SET_NULL, null=True, blank=True)
    document_name = models.CharField(max_length=255)
    page = models.PositiveIntegerField(null=True, blank=True)
    heading = models.CharField(max_length=300, blank=True, default="")
    quote = models.TextField()
    rank = models.PositiveIntegerField()
    # True when the whole document was in the prompt and this is its passage closest to the question.
    whole_document = models.BooleanField(default=False)

    class Meta:
        ordering = ["message_id", "rank"]
