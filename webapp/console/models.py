"""Console state that must outlive the process: registered models, engine tuning, audit trail, jobs."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ModelRegistration(models.Model):
    """A model the manager should know; re-registered into the manager on every process start."""

    class Dtype(models.TextChoices):
        AUTO = "auto"
        FLOAT32 = "float32"
        BFLOAT16 = "bfloat16"
        FLOAT16 = "float16"

    name = models.CharField(max_length=100, unique=True)
    aliases = models.JSONField(default=list, blank=True)
    # "default" (the bundled model) or an absolute, resolved path under settings.MODEL_ROOTS.
    source = models.CharField(max_length=1000)
    # Registered by the server from mooncake.yaml rather than by an admin.
    builtin = models.BooleanField(default=False)
    max_model_len = models.PositiveIntegerField(null=True, blank=True)
    dtype = models.CharField(max_length=16, choices=Dtype.choices, default=Dtype.AUTO)

    class Quantization(models.TextChoices):
        NONE = "none", "none (dequantized weights)"
        GGUF = "gguf", "gguf (keep Q4_0/Q4_1 4-bit, CPU)"

    quantization = models.CharField(max_length=16, choices=Quantization.choices, default=Quantization.NONE)
    # Sampling defaults (temperature, top_p, top_k, max_tokens) applied when a request leaves them out.
    sampling_defaults = models.JSONField(default=dict, blank=True)
    system_prompt = models.TextField(blank=True)
    keep_alive_seconds = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class EngineSettings(models.Model):
    """One row: engine tuning applied to every model; null means mooncake.yaml's value (or the default)."""

    class AttentionBackend(models.TextChoices):
        # inference.config._BACKENDS (not imported: that would pull torch into every Django process)
        AUTO = "auto", "auto"
        TORCH = "torch", "torch"
        TRITON = "triton", "triton"
        FLASH_ATTN = "flash_attn", "flash_attn"

    max_num_seqs = models.PositiveIntegerField(null=True, blank=True)
    max_num_batched_tokens = models.PositiveIntegerField(null=True, blank=True)
    kv_cache_memory_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    block_size = models.PositiveIntegerField(null=True, blank=True)
    enable_chunked_prefill = models.BooleanField(default=True)
    enable_prefix_caching = models.BooleanField(default=True)
    attention_backend = models.CharField(
        max_length=16, choices=AttentionBackend.choices, null=True, blank=True
    )
    enforce_eager = models.BooleanField(null=True, blank=True)
    default_temperature = models.FloatField(null=True, blank=True)
    default_top_p = models.FloatField(null=True, blank=True)
    default_max_tokens = models.PositiveIntegerField(null=True, blank=True)
    drain_timeout_seconds = models.PositiveIntegerField(default=30)
    memory_budget_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    evict_lru = models.BooleanField(default=True)
    log_prompts = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return "engine settings"


class AuditLog(models.Model):
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="console_audit"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    action = models.CharField(max_length=64, db_index=True)
    target = models.CharField(max_length=200, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.action} {self.target}"


class ConsoleJob(models.Model):
    """A Celery job started from the console (model import); the worker updates state and progress."""

    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    kind = models.CharField(max_length=32)
    target = models.CharField(max_length=300)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    progress = models.FloatField(default=0.0)  # 0..1
    message = models.TextField(blank=True)
    celery_id = models.CharField(max_length=64, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="console_jobs"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.target} ({self.state})"

    @property
    def is_active(self) -> bool:
        return self.state in (self.State.PENDING, self.State.RUNNING)
