"""Groups: create, rename and delete them; their members, limits, daily quota and model grants."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from webapp.accounts.quotas import group_used_today
from webapp.console import groups as group_services
from webapp.console.audit import audit_record
from webapp.console.organisation_forms import GroupCreateForm, GroupPolicyForm, GroupRenameForm, MemberAddForm
from webapp.console.views.access import actor_of, staff_required


def _refuse(reason: str | None) -> None:
    """A 403 with the reason, as the user pages refuse the same change made there."""
    if reason:
        raise PermissionDenied(reason[0].upper() + reason[1:] + ".")


@staff_required
@require_http_methods(["GET", "POST"])
def groups_page(request: HttpRequest) -> HttpResponse:
    form = GroupCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            group = group_services.group_create(
                name=form.cleaned_data["name"], description=form.cleaned_data["description"]
            )
        except group_services.GroupActionError as exc:
            form.add_error("name", str(exc))
        else:
            audit_record(actor=request.user, action="group.create", target=group.name)
            messages.success(request, f"Created group {group.name}.")
            return redirect("console:group", pk=group.pk)
    groups = (
        Group.objects.select_related("policy")
        .annotate(members=Count("user", distinct=True), granted=Count("models", distinct=True))
        .order_by("name")
    )
    status = 400 if request.method == "POST" else 200
    return render(request, "console/groups.html", {"groups": groups, "form": form}, status=status)


def _render_group(request: HttpRequest, group: Group, status: int = 200, **forms: object) -> HttpResponse:
    policy = group_services.policy_of(group)
    initial = {name: getattr(policy, name) for name in group_services.POLICY_FORM_FIELDS}
    actor = actor_of(request)
    # Only what the server would carry out (console.groups): no Remove beside another admin or owner, and
    # no limits or Delete on their group, for an admin who is no owner.
    locked = group_services.protected_members(actor=actor, group=group)
    context = {
        "group": group,
        "members": group.user_set.order_by("username"),
        "locked_members": {m.pk for m in locked},
        "group_refusal": group_services.group_refusal(actor=actor, group=group),
        "models": group.models.order_by("name"),
        "left_to_admins": group_services.models_left_to_admins(group=group),
        "used_today": group_used_today(group_id=group.pk),
        "quota": policy.daily_token_quota,
        "candidates": group_services.member_candidates(actor=actor, group=group),
        "rename_form": forms.get("rename_form") or GroupRenameForm(initial={"name": group.name}),
        "member_form": forms.get("member_form") or MemberAddForm(),
        "policy_form": forms.get("policy_form") or GroupPolicyForm(initial=initial),
    }
    return render(request, "console/group.html", context, status=status)


@staff_required
@require_http_methods(["GET"])
def group_page(request: HttpRequest, pk: int) -> HttpResponse:
    return _render_group(request, get_object_or_404(Group, pk=pk))


@staff_required
@require_POST
def group_rename(request: HttpRequest, pk: int) -> HttpResponse:
    group = get_object_or_404(Group, pk=pk)
    form = GroupRenameForm(request.POST)
    before = group.name
    if form.is_valid():
        try:
            group_services.group_rename(group=group, name=form.cleaned_data["name"])
        except group_services.GroupActionError as exc:
            form.add_error("name", str(exc))
        else:
            audit_record(
                actor=request.user, action="group.rename", target=group.name,
                before={"name": before}, after={"name": group.name},
            )  # fmt: skip
            messages.success(request, f"Renamed {before} to {group.name}.")
            return redirect("console:group", pk=group.pk)
    group.name = before
    return _render_group(request, group, status=400, rename_form=form)


@staff_required
@require_POST
def group_delete(request: HttpRequest, pk: int) -> HttpResponse:
    group = get_object_or_404(Group, pk=pk)
    _refuse(group_services.group_refusal(actor=actor_of(request), group=group))
    name, members = group.name, list(group.user_set.values_list("username", flat=True))
    group_services.group_delete(actor=actor_of(request), group=group)
    audit_record(actor=request.user, action="group.delete", target=name, before={"members": members})
    messages.success(request, f"Deleted group {name}.")
    return redirect("console:groups")


@staff_required
@require_POST
def member_add(request: HttpRequest, pk: int) -> HttpResponse:
    group = get_object_or_404(Group, pk=pk)
    form = MemberAddForm(request.POST)
    if form.is_valid():
        try:
            user = group_services.member_add(
                actor=actor_of(request), group=group, username=form.cleaned_data["username"]
            )
        except group_services.GroupRefused as exc:
            _refuse(str(exc))
        except group_services.GroupActionError as exc:
            form.add_error("username", str(exc))
        else:
            audit_record(
                actor=request.user, action="group.member_add", target=f"{group.name}: {user.username}"
            )
            messages.success(request, f"Added {user.username} to {group.name}.")
            return redirect("console:group", pk=group.pk)
    return _render_group(request, group, status=400, member_form=form)


@staff_required
@require_POST
def member_remove(request: HttpRequest, pk: int, user_pk: int) -> HttpResponse:
    group = get_object_or_404(Group, pk=pk)
    user = get_object_or_404(group.user_set.all(), pk=user_pk)
    _refuse(group_services.member_refusal(actor=actor_of(request), user=user))
    group_services.member_remove(actor=actor_of(request), group=group, user=user)
    audit_record(actor=request.user, action="group.member_remove", target=f"{group.name}: {user.username}")
    messages.success(request, f"Removed {user.username} from {group.name}.")
    return redirect("console:group", pk=group.pk)


@staff_required
@require_POST
def group_policy(request: HttpRequest, pk: int) -> HttpResponse:
    group = get_object_or_404(Group, pk=pk)
    _refuse(group_services.group_refusal(actor=actor_of(request), group=group))
    form = GroupPolicyForm(request.POST)
    if not form.is_valid():
        return _render_group(request, group, status=400, policy_form=form)
    before, after = group_services.policy_set(actor=actor_of(request), group=group, values=form.cleaned_data)
    audit_record(actor=request.user, action="group.policy", target=group.name, before=before, after=after)
    messages.success(request, f"Saved the limits of {group.name}.")
    return redirect("console:group", pk=group.pk)
