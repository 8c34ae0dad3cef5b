"""API keys, per-user limits and daily usage totals."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models


class ApiKey(models.Model):
    """A user's API key; only a hash of the secret is kept, so a leaked database leaks no keys."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    # The first characters of the secret, shown in listings so users can tell keys apart.
    prefix = models.CharField(max_length=16, db_index=True)
    secret_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Per-key limits; null falls back to the user's limits, then to settings.MOONCAKE_API_LIMITS.
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    max_concurrent_requests = models.PositiveIntegerField(null=True, blank=True)
    # Prompt plus generated tokens this key may use per UTC day (webapp.accounts.quotas); null: no quota.
    daily_token_quota = models.PositiveBigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class UserApiLimits(models.Model):
    """Limits shared by all of one user's keys (each key also has its own)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_limits")
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    max_concurrent_requests = models.PositiveIntegerField(null=True, blank=True)
    # Null: settings.MOONCAKE_DAILY_TOKEN_QUOTA (0 there: none).
    daily_token_quota = models.PositiveBigIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"limits for {self.user}"


class GroupPolicy(models.Model):
    """What a group's members may use together: limits on top of each member's own (the strictest
    applies), and a daily token quota over all of them."""

    group = models.OneToOneField(Group, on_delete=models.CASCADE, related_name="policy")
    description = models.CharField(max_length=200, blank=True)
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    max_concurrent_requests = models.PositiveIntegerField(null=True, blank=True)
    daily_token_quota = models.PositiveBigIntegerField(null=True, blank=True)
    # Members may make their own API keys even while the site-wide switch (SiteSettings) is off.
    api_keys_allowed = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"policy of {self.group}"


class DailyUsage(models.Model):
    """Token totals per (UTC day, user, key, model, source), added to as each request finishes; user and
    key are null for anonymous use when auth is off. Quotas and the usage page read these rows, so the
    request log's detail can be pruned without losing a total."""

    date = models.DateField(db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="daily_usage"
    )
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.CASCADE, related_name="daily_usage"
    )
    model = models.CharField(max_length=200, blank=True, default="")
    source = models.CharField(max_length=8, default="api")  # "api" or "chat", as RequestLog.source
    requests = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-date"]
        constraints = [
            models.UniqueConstraint(
                fields=["date", "user", "api_key", "model", "source"],
                name="daily_usage_unique_day_user_key_model_source",
            )
        ]

    def __str__(self) -> str:
        return f"{self.date} {self.user_id}/{self.api_key_id}"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class SignupSettings(models.Model):
    """The one row of sign-up policy an admin edits in the console (pk is always 1)."""

    enabled = models.BooleanField(default=False)
    # Lower-case email domains, one a line: sign-ups and first SSO logins from these are approved at once.
    auto_approve_domains = models.TextField(blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"sign-up {'on' if self.enabled else 'off'}"

    @property
    def domains(self) -> list[str]:
        return [d for d in self.auto_approve_domains.split() if d]


class AccountStatus(models.Model):
    """Why an account that someone asked for is (not yet) usable; accounts without a row are approved.

    Only is_active lets a user log in: a pending or rejected account is also inactive, and this row
    supplies the message that tells its owner why.
    """

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"

    class Source(models.TextChoices):
        SIGNUP = "signup", "Sign-up form"
        SSO = "sso", "Single sign-on"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="account_status"
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING, db_index=True)
    source = models.CharField(max_length=16, choices=Source.choices)
    requested_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["requested_at"]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.state}"


class SsoIdentity(models.Model):
    """Links a user to one (issuer, subject): accounts are never matched by email, a provider may reuse."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identities"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    # Group names the last login's claim granted, so groups the provider drops are removed (and no others).
    groups = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_unique_sub")]

    def __str__(self) -> str:
        return f"{self.issuer} {self.subject}"


class RequestLog(models.Model):
    """One row per request, the API's and the chat's alike, for the console's request log."""

    class Source(models.TextChoices):
        API = "api", "API"
        CHAT = "chat", "Chat"

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="api_requests",
    )
    # Null for chat rows (a signed-in user, no key) and anonymous API calls.
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="requests"
    )
    # Chat replies are counted as API requests are; this says which door a row came through.
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.API, db_index=True)
    # The X-Request-ID the response carried: joins this row to the server log lines of the request.
    request_id = models.CharField(max_length=128, blank=True, db_index=True)
    endpoint = models.CharField(max_length=64)
    model = models.CharField(max_length=200, blank=True)
    stream = models.BooleanField(default=False)
    status_code = models.PositiveSmallIntegerField()
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    # Seconds; null when no token was produced.
    ttft_s = models.FloatField(null=True, blank=True)
    duration_s = models.FloatField()
    finish_reason = models.CharField(max_length=32, blank=True)
    error = models.TextField(blank=True)
    # Only filled when the console's log_prompts switch is on: prompts are the users' data.
    prompt_text = models.TextField(blank=True)

    class Meta:
        # The table keeps the name it had when the API app owned the model (its migrations made it).
        db_table = "api_requestlog"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.endpoint} {self.status_code}"
