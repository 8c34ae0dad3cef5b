"""Rows the core app owns: the lock that serializes first-run setup, and the serving configuration an
admin edits in the console (registered models, engine tuning), which the API and chat read too."""

from __future__ import annotations

from django.contrib.auth.models import Group
from django.db import models

from inference.api import ATTENTION_BACKENDS, DTYPES, QUANTIZATIONS, TASKS

# The engine's own choice lists, labelled for the console. The labels are the ones the migrations
# recorded (dtype's were Django's title-cased defaults), so no new migration follows from this.
DTYPE_CHOICES = [(d, d.capitalize()) for d in DTYPES]
_QUANTIZATION_LABELS = {"none": "none (dequantized weights)", "int4": "int4 (keep Q4_0/Q4_1 4-bit, CPU)"}
QUANTIZATION_CHOICES = [(q, _QUANTIZATION_LABELS.get(q, q)) for q in QUANTIZATIONS]
ATTENTION_BACKEND_CHOICES = [(b, b) for b in ATTENTION_BACKENDS]
KV_CACHE_DTYPE_CHOICES = [(d, d) for d in DTYPES]  # kv_cache_dtype takes dtype's names (auto: the dtype's)
_TASK_LABELS = {"generate": "generate (chat and completions)", "embed": "embed (/v1/embeddings)"}
TASK_CHOICES = [(t, _TASK_LABELS.get(t, t)) for t in TASKS]


class SetupLock(models.Model):
    """One row, made by the migration. First-run setup updates it before anything else, so two setups
    racing queue on its row lock (PostgreSQL) or on the write lock (SQLite): the second then finds the
    first one's account and gives up."""

    SINGLETON = 1

    id = models.PositiveSmallIntegerField(primary_key=True)
    last_taken = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"setup lock (last taken {self.last_taken})"


class ModelRegistration(models.Model):
    """A model the manager should know; re-registered into the manager on every process start.

    Every replica applies the row (console.replication): its engine settings as they stand, and the
    admin's last load or unload once per `state_revision`, so a replica started later converges too.
    """

    class Desired(models.TextChoices):
        NONE = "", "as the server decides"
        LOADED = "loaded"
        UNLOADED = "unloaded"

    name = models.CharField(max_length=100, unique=True)
    aliases = models.JSONField(default=list, blank=True)
    # A bundled model's id ("default", "default-embedding") or an absolute, resolved path under MODEL_ROOTS.
    source = models.CharField(max_length=1000)
    # Registered by the server from mooncake.yaml rather than by an admin.
    builtin = models.BooleanField(default=False)
    max_model_len = models.PositiveIntegerField(null=True, blank=True)
    dtype = models.CharField(max_length=16, choices=DTYPE_CHOICES, default="auto")
    quantization = models.CharField(max_length=16, choices=QUANTIZATION_CHOICES, default="none")
    # What it serves (EngineConfig.task); a model mooncake.yaml serves takes its entry's instead.
    task = models.CharField(
        max_length=16,
        choices=TASK_CHOICES,
        default="generate",
        help_text="embed: a BERT embedding model, served on /v1/embeddings.",
    )
    # Sampling defaults (temperature, top_p, top_k, max_tokens) applied when a request leaves them out.
    sampling_defaults = models.JSONField(default=dict, blank=True)
    system_prompt = models.TextField(blank=True)
    keep_alive_seconds = models.PositiveIntegerField(null=True, blank=True)
    # The admin's last load/unload (a level a replica reaches once per revision: keep-alive and eviction
    # may unload it later on one replica without the others reloading it), and the default model.
    desired_state = models.CharField(max_length=16, choices=Desired.choices, default="", blank=True)
    state_revision = models.PositiveIntegerField(default=0)
    is_default = models.BooleanField(default=False)
    # Who may use it: unrestricted, everyone; restricted, members of allowed_groups and staff (admins only
    # when it has no groups: deleting a model's last group never opens it up). Others get a 404.
    restricted = models.BooleanField(default=False)
    allowed_groups = models.ManyToManyField(Group, blank=True, related_name="models")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        # The console app created the table; keeping its name means a running replica never loses it.
        db_table = "console_modelregistration"

    def __str__(self) -> str:
        return self.name


class EngineSettings(models.Model):
    """One row: engine tuning applied to every model; null means mooncake.yaml's value (or the default)."""

    max_num_seqs = models.PositiveIntegerField(null=True, blank=True)
    max_num_batched_tokens = models.PositiveIntegerField(null=True, blank=True)
    kv_cache_memory_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    block_size = models.PositiveIntegerField(null=True, blank=True)
    enable_chunked_prefill = models.BooleanField(default=True)
    enable_prefix_caching = models.BooleanField(default=True)
    attention_backend = models.CharField(
        max_length=16, choices=ATTENTION_BACKEND_CHOICES, null=True, blank=True
    )
    enforce_eager = models.BooleanField(null=True, blank=True)
    kv_cache_dtype = models.CharField(max_length=16, choices=KV_CACHE_DTYPE_CHOICES, null=True, blank=True)
    default_temperature = models.FloatField(null=True, blank=True)
    default_top_p = models.FloatField(null=True, blank=True)
    default_max_tokens = models.PositiveIntegerField(null=True, blank=True)
    # Null: MOONCAKE_DRAIN_TIMEOUT / server.drain_timeout (engine_settings.drain_timeout reads both).
    drain_timeout_seconds = models.PositiveIntegerField(null=True, blank=True)
    memory_budget_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    evict_lru = models.BooleanField(default=True)
    log_prompts = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "console_enginesettings"  # as ModelRegistration's

    def __str__(self) -> str:
        return "engine settings"


class SiteSettings(models.Model):
    """Site-wide settings an admin edits on the console's Site page: one row (pk 1)."""

    class BannerLevel(models.TextChoices):
        INFO = "info", "information"
        WARNING = "warning", "warning"

    SINGLETON = 1

    # New chats start with it unless the user set their own default system prompt.
    default_system_prompt = models.TextField(blank=True, max_length=20_000)
    banner_text = models.CharField(max_length=500, blank=True)
    banner_level = models.CharField(max_length=8, choices=BannerLevel.choices, default=BannerLevel.INFO)
    # Raised whenever the banner changes, so a banner dismissed before shows again once it says something new.
    banner_revision = models.PositiveIntegerField(default=0)
    # Off: only admins issue API keys (console); on: everyone may make and revoke their own in Settings.
    user_api_keys = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return "site settings"
