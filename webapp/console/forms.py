"""Console forms: every 400 the console returns is raised here (views stay thin)."""

from __future__ import annotations

import re
from typing import Any, cast

from django import forms
from django.conf import settings
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from inference.api import EngineConfig
from webapp.accounts.models import RequestLog
from webapp.console.paths import ModelPathError, model_source
from webapp.console.tuning_text import TUNING_HELP, TUNING_LABELS
from webapp.core.engine_settings import ENGINE_FIELDS
from webapp.core.models import (
    ATTENTION_BACKEND_CHOICES,
    DTYPE_CHOICES,
    KV_CACHE_DTYPE_CHOICES,
    QUANTIZATION_CHOICES,
    EngineSettings,
    ModelRegistration,
)
from webapp.serving.engine import engine_config_dict
from webapp.serving.sampling import TEMPERATURE, TOKEN_COUNT, TOP_K, TOP_P, Range

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$")
_CODE_SPAN = re.compile(r"`([^`]+)`")


def help_html(text: str) -> SafeString:
    """Help text with `name` spans shown as <code>: templates print help_text as it is, so the markup is
    made here, around escaped text (the templates stay plain `{{ field.help_text }}`)."""
    parts = _CODE_SPAN.split(text)  # odd indexes: the insides of backtick spans
    html = "".join(f"<code>{escape(p)}</code>" if i % 2 else escape(p) for i, p in enumerate(parts))
    return mark_safe(html)  # every piece of text above is escaped


def _model_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise forms.ValidationError("Use letters, digits, '.', '_', ':' or '-' (at most 100 characters).")
    return value


class RegisterLocalForm(forms.Form):
    name = forms.CharField(max_length=100, help_text=help_html("What API clients pass as `model`."))
    path = forms.CharField(
        max_length=1000,
        help_text="A model folder or .gguf file under an allowed root (relative: from the first root), "
        "or a bundled model: default (chat) or default-embedding.",
    )
    aliases = forms.CharField(required=False, help_text="Other names for it, separated by commas.")
    task = ModelRegistration._meta.get_field("task").formfield(required=False)  # empty: generate
    keep_alive_seconds = forms.IntegerField(
        required=False, min_value=1, help_text="Unload after this many idle seconds (empty: never)."
    )

    def clean_name(self) -> str:
        return _model_name(self.cleaned_data["name"].strip())

    def clean_path(self) -> str:
        try:
            return model_source(self.cleaned_data["path"])
        except ModelPathError as exc:
            raise forms.ValidationError(str(exc)) from exc

    def clean_aliases(self) -> list[str]:
        raw = self.cleaned_data.get("aliases") or ""
        return [_model_name(a.strip()) for a in raw.split(",") if a.strip()]


class RegisterHubForm(forms.Form):
    repo_id = forms.CharField(max_length=200, help_text="For example HuggingFaceTB/SmolLM2-135M-Instruct.")


class ModelDefaultsForm(forms.Form):
    max_model_len = forms.IntegerField(
        required=False,
        min_value=16,
        help_text="Longest prompt plus reply in tokens (empty: the model's own).",
    )
    dtype = forms.ChoiceField(
        choices=DTYPE_CHOICES,
        help_text="Weight precision; auto picks bf16 on GPUs and on AMX or AVX512-BF16 CPUs, else fp32.",
    )
    quantization = forms.ChoiceField(
        required=False,
        choices=QUANTIZATION_CHOICES,
        help_text="gguf runs a GGUF's 4-bit layers as they are (CPU, bf16): less memory, faster single "
        "streams, slower large batches and long prompts.",
    )
    # The API's own ranges (webapp.serving.sampling), so a saved default is one every request accepts.
    temperature = forms.FloatField(
        required=False, min_value=TEMPERATURE.low, max_value=TEMPERATURE.high, help_text="0 is greedy."
    )
    top_p = forms.FloatField(
        required=False,
        min_value=TOP_P.low,
        max_value=TOP_P.high,
        validators=[TOP_P.validator()],
        help_text="Nucleus sampling mass.",
    )
    top_k = forms.IntegerField(
        required=False,
        min_value=TOP_K.low,
        max_value=TOP_K.high,
        help_text="Keep the k likeliest tokens (-1: off).",
    )
    max_tokens = forms.IntegerField(
        required=False,
        min_value=TOKEN_COUNT.low,
        max_value=TOKEN_COUNT.high,
        help_text="Reply length when unset.",
    )
    system_prompt = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3}), help_text="Prepended to chats."
    )
    keep_alive_seconds = forms.IntegerField(
        required=False, min_value=1, help_text="Unload after this many idle seconds (empty: never)."
    )

    @classmethod
    def for_registration(cls, row: ModelRegistration, data: Any = None) -> ModelDefaultsForm:
        initial = {
            "max_model_len": row.max_model_len,
            "dtype": row.dtype,
            "quantization": row.quantization,
            "system_prompt": row.system_prompt,
            "keep_alive_seconds": row.keep_alive_seconds,
            **row.sampling_defaults,
        }
        return cls(data, initial=initial, prefix=f"m{row.pk}")

    def defaults(self) -> dict[str, Any]:
        data = self.cleaned_data
        sampling = {
            k: data[k] for k in ("temperature", "top_p", "top_k", "max_tokens") if data[k] is not None
        }
        return {
            "max_model_len": data["max_model_len"],
            "dtype": data["dtype"],
            "quantization": data["quantization"] or "none",
            "sampling_defaults": sampling,
            "system_prompt": data["system_prompt"],
            "keep_alive_seconds": data["keep_alive_seconds"],
        }


_FROM_YAML = "from mooncake.yaml"
_ON_OFF = [("on", "on"), ("off", "off")]


def _on_off(value: Any) -> bool:
    return value is True or value == "on"


class _OnOffField(forms.TypedChoiceField):
    """A nullable bool as a select: blank keeps mooncake.yaml's value; anything but on/off is an error."""

    def __init__(self, **kwargs: Any) -> None:
        choices = [("", _FROM_YAML), *_ON_OFF]
        super().__init__(choices=choices, coerce=_on_off, empty_value=None, required=False, **kwargs)

    def prepare_value(self, value: Any) -> Any:
        # The row holds True/False/None; the select's options are on/off/blank.
        return {True: "on", False: "off", None: ""}.get(value, value)


class TuningForm(forms.ModelForm[EngineSettings]):
    enforce_eager = _OnOffField(
        label=TUNING_LABELS["enforce_eager"], help_text=help_html(TUNING_HELP["enforce_eager"])
    )

    class Meta:
        model = EngineSettings
        fields = list(TUNING_HELP)
        help_texts = {name: help_html(text) for name, text in TUNING_HELP.items()}
        labels = TUNING_LABELS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Empty engine fields show, as a placeholder, the value the engine uses without them."""
        super().__init__(*args, **kwargs)
        backends = ATTENTION_BACKEND_CHOICES
        self._blank_choice("attention_backend", _FROM_YAML, backends)
        self._blank_choice("kv_cache_dtype", _FROM_YAML, KV_CACHE_DTYPE_CHOICES)
        configured = f"{float(settings.MOONCAKE_DRAIN_TIMEOUT):g}"
        self.fields["drain_timeout_seconds"].widget.attrs["placeholder"] = configured
        try:
            current = EngineConfig.from_dict(engine_config_dict(settings.MOONCAKE))
        except ValueError:
            return
        for name in ("max_num_seqs", "max_num_batched_tokens", "kv_cache_memory_bytes", "block_size"):
            value = getattr(current, name)
            self.fields[name].widget.attrs["placeholder"] = "engine default" if value is None else str(value)
        # The blank choice names the value it keeps.
        self._blank_choice("attention_backend", f"{_FROM_YAML} ({current.attention_backend})", backends)
        kv_dtype = f"{_FROM_YAML} ({current.kv_cache_dtype})"
        self._blank_choice("kv_cache_dtype", kv_dtype, KV_CACHE_DTYPE_CHOICES)
        eager = "on" if current.enforce_eager else "off"
        self._blank_choice("enforce_eager", f"{_FROM_YAML} ({eager})", _ON_OFF)

    def _blank_choice(self, name: str, label: str, choices: list[tuple[str, str]]) -> None:
        cast(forms.ChoiceField, self.fields[name]).choices = [("", label), *choices]

    def clean_default_temperature(self) -> float | None:
        return _in_range(self.cleaned_data["default_temperature"], TEMPERATURE)

    def clean_default_top_p(self) -> float | None:
        return _in_range(self.cleaned_data["default_top_p"], TOP_P)

    def clean_default_max_tokens(self) -> int | None:
        value: int | None = self.cleaned_data["default_max_tokens"]
        _in_range(value, TOKEN_COUNT)
        return value

    def clean_block_size(self) -> int | None:
        value = self.cleaned_data["block_size"]
        if value is not None and (value < 1 or value & (value - 1)):
            raise forms.ValidationError("The block size must be a power of two.")
        return value

    def clean(self) -> dict[str, Any]:
        """Let EngineConfig judge the combination (e.g. a token budget below max_num_seqs)."""
        data = super().clean() or {}
        values = engine_config_dict(settings.MOONCAKE)
        values.update({k: data[k] for k in ENGINE_FIELDS if data.get(k) is not None})
        seqs, tokens = values.get("max_num_seqs"), values.get("max_num_batched_tokens")
        if seqs is not None and tokens is not None and int(tokens) < int(seqs):
            raise forms.ValidationError(
                "max_num_batched_tokens must be at least max_num_seqs: every running sequence decodes "
                "one token per step."
            )
        try:
            EngineConfig.from_dict(values)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data


def _in_range(value: float | None, allowed: Range[Any]) -> float | None:
    if value is not None:
        allowed.validator()(value)
    return value


class RequestFilterForm(forms.Form):
    # Which door a request came in by: the chat or the API.
    source = forms.ChoiceField(required=False, choices=[("", "any"), *RequestLog.Source.choices])
    # The id an error message quotes ("request id ..."): pasted here, it finds that request's row.
    request_id = forms.CharField(required=False, max_length=128, label="Request id")
    user = forms.CharField(required=False)
    key_prefix = forms.CharField(required=False, label="Key prefix")
    model = forms.CharField(required=False)
    finish_reason = forms.ChoiceField(
        required=False, choices=[("", "any"), ("stop", "stop"), ("length", "length"), ("abort", "abort")]
    )
    status = forms.ChoiceField(
        required=False, choices=[("", "any"), ("ok", "ok"), ("error", "error"), ("429", "429")]
    )
    min_tokens = forms.IntegerField(required=False, min_value=0, label="Min completion tokens")
    min_ttft_s = forms.FloatField(required=False, min_value=0, label="Min TTFT (s)")
    min_duration_s = forms.FloatField(required=False, min_value=0, label="Min duration (s)")
