from django.contrib import admin

from webapp.accounts.models import ApiKey, DailyUsage, UserApiLimits


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin[ApiKey]):
    list_display = ("prefix", "name", "user", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "secret_hash", "created_at", "last_used_at")


admin.site.register(UserApiLimits)
admin.site.register(DailyUsage)
