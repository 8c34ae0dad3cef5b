"""One range per sampling parameter: derived from the engine's bounds, and the same in every web entry."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from pydantic import ValidationError

from inference.api import MAX_INT32, MAX_LOGIT_BIAS_VALUE, MAX_PENALTY, MAX_TEMPERATURE, SamplingParams
from webapp.api.schemas.completions import CompletionRequest
from webapp.chat.forms import SettingsForm
from webapp.chat.services import conversation_create, conversation_update_settings
from webapp.chat.transfer import ExportedChat
from webapp.console.forms import ModelDefaultsForm
from webapp.core.errors import InvalidRequest
from webapp.serving.sampling import (
    API_MAX_TEMPERATURE,
    LOGIT_BIAS,
    PENALTY,
    SEED,
    TEMPERATURE,
    TOKEN_COUNT,
    TOP_K,
    TOP_P,
    Range,
    sampling_params,
)


def test_ranges_come_from_the_engine_and_fit_inside_it() -> None:
    assert (PENALTY.low, PENALTY.high) == (-MAX_PENALTY, MAX_PENALTY)
    assert (LOGIT_BIAS.low, LOGIT_BIAS.high) == (-MAX_LOGIT_BIAS_VALUE, MAX_LOGIT_BIAS_VALUE)
    assert TOP_K.high == TOKEN_COUNT.high == MAX_INT32
    assert TEMPERATURE.high == API_MAX_TEMPERATURE <= MAX_TEMPERATURE  # API policy, stricter than the engine
    # Every value the web accepts is one the engine accepts.
    SamplingParams(
        temperature=TEMPERATURE.high,
        top_k=int(TOP_K.high),
        presence_penalty=PENALTY.low,
        frequency_penalty=PENALTY.high,
        logit_bias={0: LOGIT_BIAS.low, 1: LOGIT_BIAS.high},
        seed=int(SEED.low),
        max_tokens=int(TOKEN_COUNT.high),
    )


def test_range_checks_and_messages() -> None:
    assert Range(0.0, 1.0, low_open=True).describe() == "above 0.0 and at most 1.0"
    assert not TOP_P.contains(0.0) and TOP_P.contains(1e-6) and not TEMPERATURE.contains(float("nan"))
    with pytest.raises(ValueError, match=r"top_p must be above 0\.0 and at most 1\.0"):
        TOP_P.check("top_p", 0.0)


def _chat_form(**values: Any) -> bool:
    data = {"system_prompt": "", "model": "", "temperature": 1.0, "top_p": 1.0, "max_tokens": 16, **values}
    return SettingsForm(data=data).is_valid()


def _service(user: User, **values: Any) -> bool:
    data = {"system_prompt": "", "model": "", "temperature": 1.0, "top_p": 1.0, "max_tokens": 16, **values}
    try:
        conversation_update_settings(conversation=conversation_create(user=user), **data)
    except ValueError:
        return False
    return True


def _schema(model: Any, **values: Any) -> bool:
    try:
        model.model_validate(values)
    except ValidationError:
        return False
    return True


def _console(**values: Any) -> bool:
    return ModelDefaultsForm(data={"dtype": "auto", **values}).is_valid()


@pytest.mark.database
@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [
        ("temperature", 0.0, True),
        ("temperature", 2.0, True),
        ("temperature", 2.01, False),
        ("top_p", 0.0, False),
        ("top_p", 0.001, True),  # the chat form used to stop at 0.01
        ("top_p", 1.0, True),
        ("top_p", 1.01, False),
    ],
)
def test_every_entry_agrees(db: None, field: str, value: float, ok: bool) -> None:
    user = User.objects.create_user("u")
    assert _chat_form(**{field: value}) is ok
    assert _service(user, **{field: value}) is ok
    assert _schema(ExportedChat, **{field: value}) is ok
    assert _schema(CompletionRequest, prompt="x", **{field: value}) is ok
    assert _console(**{field: value}) is ok


def test_sampling_params_are_the_engines_and_its_refusals_are_a_400() -> None:
    params = sampling_params(temperature=0.0, top_p=0.5, max_tokens=7)
    assert isinstance(params, SamplingParams)
    assert (params.temperature, params.top_p, params.max_tokens) == (0.0, 0.5, 7)
    with pytest.raises(InvalidRequest) as refused:
        sampling_params(max_tokens=0, explain="Check this chat's settings: ", code="invalid")
    assert refused.value.status == 400 and refused.value.code == "invalid"
    assert (
        refused.value.message.startswith("Check this chat's settings: ")
        and "max_tokens" in refused.value.message
    )
    with pytest.raises(InvalidRequest, match="unexpected keyword"):
        sampling_params(no_such_field=1)
