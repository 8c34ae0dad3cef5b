"""The models page: register, load/unload with live state, default, per-model defaults, budget, keep-alive."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest
from django.test import Client
from django.urls import reverse

from inference import EngineConfig, ModelManager
from tests.webapp.console.conftest import MIB, SizedFakeEngine, make_hf_dir
from webapp.console.models import AuditLog
from webapp.console.registry import sync_manager
from webapp.core.models import EngineSettings, ModelRegistration
from webapp.serving.runtime import get_runtime


def register(client: Client, root: Path, name: str, **extra: Any) -> Any:
    make_hf_dir(root / name)
    data = {"name": name, "path": str(root / name), "aliases": "", "keep_alive_seconds": ""} | extra
    return client.post(reverse("console:model-register"), data)


def refused(client: Client, response: Any) -> str:
    """A refused register form goes back to the models page (its URL, its tab), its errors shown once."""
    assert response.status_code == 302 and response["Location"] == reverse("console:models")
    page = client.get(response["Location"]).content.decode()
    assert 'class="errorlist' in page
    assert 'class="errorlist' not in client.get(reverse("console:models")).content.decode()  # only once
    return page


def state(manager: ModelManager, name: str) -> str:
    return next(i.state for i in manager.list() if i.name == name)


@pytest.mark.database
def test_table_lists_the_manager_models(staff_client: Client, manager: ModelManager) -> None:
    manager.load("base")
    sync_manager()  # as the server does on start
    html = staff_client.get(reverse("console:models")).content.decode()
    for text in (
        "base",
        "alias default",
        "LlamaForCausalLM",
        "134.5 M",
        "90.0 MiB",
        "100.0 MiB",
        "4096",
        "loaded",
    ):
        assert text in html
    # The server's own model gets a row so its defaults can be edited too.
    assert ModelRegistration.objects.get(name="base").builtin


@pytest.mark.database
def test_register_from_disk(staff_client: Client, manager: ModelManager, model_root: Path) -> None:
    response = register(staff_client, model_root, "tiny", aliases="small, mini", keep_alive_seconds="60")
    assert response.status_code == 302
    row = ModelRegistration.objects.get(name="tiny")
    assert row.source == str((model_root / "tiny").resolve()) and row.aliases == ["small", "mini"]
    info = next(i for i in manager.list() if i.name == "tiny")
    assert info.aliases == ["small", "mini"] and info.keep_alive_seconds == 60
    entry = AuditLog.objects.get(action="model.register")
    assert (
        entry.target == "tiny"
        and entry.actor is not None
        and (entry.after or {})["aliases"] == ["small", "mini"]
    )


@pytest.mark.database
def test_a_registered_model_is_confined_to_the_roots_again_at_load(
    staff_client: Client, manager: ModelManager, model_root: Path
) -> None:
    from webapp.console.registry import engine_config_for

    register(staff_client, model_root, "tiny")
    config = engine_config_for(ModelRegistration.objects.get(name="tiny"))
    assert config.model_roots == (str(model_root),)


@pytest.mark.database
def test_register_refuses_escapes_and_clashes(
    staff_client: Client, manager: ModelManager, model_root: Path, tmp_path: Path
) -> None:
    make_hf_dir(tmp_path / "elsewhere")
    (model_root / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    for path in ("../elsewhere", str(tmp_path / "elsewhere"), "link"):
        data = {"name": "x", "path": path}
        page = refused(staff_client, staff_client.post(reverse("console:model-register"), data))
        assert "outside the allowed model roots" in page
    assert not ModelRegistration.objects.filter(name="x").exists()
    assert register(staff_client, model_root, "base").status_code == 302  # name clash: message, no row
    assert ModelRegistration.objects.filter(name="base", builtin=True).count() == 1
    assert not AuditLog.objects.filter(action="model.register").exists()


@pytest.mark.database
def test_load_unload_default_with_live_state(
    staff_client: Client, manager: ModelManager, model_root: Path, engines: list[SizedFakeEngine]
) -> None:
    register(staff_client, model_root, "tiny")
    response = staff_client.post(reverse("console:model-load", args=["tiny"]), headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert 'id="models-live"' in response.content.decode()
    get_runtime().jobs.wait_all()
    assert state(manager, "tiny") == "loaded"
    table = staff_client.get(reverse("console:models-table")).content.decode()
    assert 'data-busy="false"' in table and 'data-state="loaded"' in table

    staff_client.post(reverse("console:model-default", args=["tiny"]), headers={"HX-Request": "true"})
    assert manager.default_name == "tiny"
    staff_client.post(reverse("console:model-unload", args=["tiny"]), headers={"HX-Request": "true"})
    get_runtime().jobs.wait_all()
    assert state(manager, "tiny") == "available"
    assert engines[-1].shutdown_calls == [30.0]  # drains for the configured timeout
    actions = list(AuditLog.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["model.register", "model.load", "model.set_default", "model.unload"]


@pytest.mark.database
def test_busy_table_polls_until_done(staff_client: Client, manager: ModelManager) -> None:
    manager.register("slow", EngineConfig(model="x"))
    gate = threading.Event()
    job = get_runtime().jobs.start("load", "slow", lambda: str(gate.wait(5)))
    html = staff_client.get(reverse("console:models-table")).content.decode()
    assert 'hx-trigger="every 1s"' in html and 'data-busy="true"' in html
    again = staff_client.post(reverse("console:model-load", args=["slow"]), headers={"HX-Request": "true"})
    assert "busy with another job" in again.content.decode()
    gate.set()
    get_runtime().jobs.wait_all()
    assert job.state == "succeeded"
    assert 'hx-trigger="every 1s"' not in staff_client.get(reverse("console:models-table")).content.decode()


@pytest.mark.database
def test_unknown_model_action_is_reported(staff_client: Client, manager: ModelManager) -> None:
    response = staff_client.post(reverse("console:model-load", args=["nope"]), headers={"HX-Request": "true"})
    assert "not a registered model" in response.content.decode()


@pytest.mark.database
def test_failed_load_shows_the_error(staff_client: Client, manager: ModelManager) -> None:
    manager._factory = lambda config: (_ for _ in ()).throw(RuntimeError("weights are corrupt"))
    staff_client.post(reverse("console:model-load", args=["base"]), headers={"HX-Request": "true"})
    get_runtime().jobs.wait_all()
    html = staff_client.get(reverse("console:models-table")).content.decode()
    assert 'data-state="failed"' in html and "weights are corrupt" in html


@pytest.mark.database
def test_memory_budget_evicts_lru_or_refuses(
    staff_client: Client, manager: ModelManager, model_root: Path
) -> None:
    register(staff_client, model_root, "tiny")
    EngineSettings.objects.create(memory_budget_bytes=150 * MIB)
    for name in ("base", "tiny"):
        staff_client.post(reverse("console:model-load", args=[name]))
        get_runtime().jobs.wait_all()
    assert state(manager, "tiny") == "loaded" and state(manager, "base") == "available"  # evicted

    EngineSettings.objects.update(evict_lru=False)
    staff_client.post(reverse("console:model-load", args=["base"]))
    get_runtime().jobs.wait_all()
    info = next(i for i in manager.list() if i.name == "base")
    assert info.state == "failed"
    assert f"needs {100 * MIB} bytes but only {50 * MIB}" in str(info.error)
    assert "LRU eviction is off" in str(info.error)


@pytest.mark.database
def test_keep_alive_unloads_idle_models(
    staff_client: Client, manager: ModelManager, model_root: Path
) -> None:
    register(staff_client, model_root, "tiny", keep_alive_seconds="5")
    manager.load("tiny")
    manager.load("base")
    assert manager.reap_idle(now=time.time() + 1) == []
    assert manager.reap_idle(now=time.time() + 10) == ["tiny"]  # base has no keep-alive
    assert state(manager, "tiny") == "available"


@pytest.mark.database
def test_defaults_save_and_restart_when_needed(
    staff_client: Client, manager: ModelManager, engines: list[SizedFakeEngine]
) -> None:
    manager.load("base")
    sync_manager()
    row = ModelRegistration.objects.get(name="base")
    prefix = f"m{row.pk}-"
    data = {prefix + "dtype": "auto", prefix + "temperature": "0.3", prefix + "system_prompt": "Be brief."}
    response = staff_client.post(
        reverse("console:model-defaults", args=[row.pk]), data, headers={"HX-Request": "true"}
    )
    assert "Saved base" in response.content.decode()
    row.refresh_from_db()
    assert row.sampling_defaults == {"temperature": 0.3} and row.system_prompt == "Be brief."
    assert len(engines) == 1  # sampling defaults need no restart

    data |= {prefix + "dtype": "float32", prefix + "max_model_len": "512"}
    response = staff_client.post(
        reverse("console:model-defaults", args=[row.pk]), data, headers={"HX-Request": "true"}
    )
    assert "restarts to apply" in response.content.decode()
    get_runtime().jobs.wait_all()
    assert (
        len(engines) == 2
        and engines[-1].config.dtype == "float32"
        and engines[-1].config.max_model_len == 512
    )
    assert engines[0].shutdown_calls == [30.0]
    assert manager.default_name == "base" and state(manager, "base") == "loaded"
    entry = AuditLog.objects.filter(action="model.defaults").latest("id")
    assert (entry.before or {})["dtype"] == "auto" and (entry.after or {})["dtype"] == "float32"


@pytest.mark.database
def test_quantization_is_per_model_and_restarts_it(
    staff_client: Client,
    manager: ModelManager,
    engines: list[SizedFakeEngine],
    model_root: Path,
    settings: Any,
) -> None:
    """A 4-bit setting in mooncake.yaml belongs to the model it serves: the builtin row takes it, and a
    Hugging Face folder registered in the console does not inherit it (it could not load)."""
    # The value's old name ("gguf"), read as the new one.
    settings.MOONCAKE = {**settings.MOONCAKE, "model": {"model_id": "default", "quantization": "gguf"}}
    sync_manager()
    base = ModelRegistration.objects.get(name="base")
    assert base.builtin and base.quantization == "int4"
    register(staff_client, model_root, "tiny")
    tiny = ModelRegistration.objects.get(name="tiny")
    assert tiny.quantization == "none"
    manager.load("tiny")
    assert engines[-1].config.quantization == "none"

    prefix = f"m{base.pk}-"
    data = {prefix + "dtype": "auto", prefix + "quantization": "none"}
    response = staff_client.post(
        reverse("console:model-defaults", args=[base.pk]), data, headers={"HX-Request": "true"}
    )
    assert "restarts to apply" in response.content.decode()
    get_runtime().jobs.wait_all()
    base.refresh_from_db()
    assert base.quantization == "none"
    manager.load("base")
    assert engines[-1].config.quantization == "none" and engines[-1].config.model == "default"
    data[prefix + "quantization"] = "q2"
    response = staff_client.post(
        reverse("console:model-defaults", args=[base.pk]), data, headers={"HX-Request": "true"}
    )
    assert "quantization" in response.content.decode() and "q2" in response.content.decode()


@pytest.mark.database
def test_invalid_defaults_are_reported(staff_client: Client, manager: ModelManager) -> None:
    sync_manager()
    row = ModelRegistration.objects.get(name="base")
    data = {f"m{row.pk}-dtype": "int3", f"m{row.pk}-temperature": "9"}
    response = staff_client.post(
        reverse("console:model-defaults", args=[row.pk]), data, headers={"HX-Request": "true"}
    )
    html = response.content.decode()
    assert "dtype" in html and "temperature" in html
    assert not AuditLog.objects.filter(action="model.defaults").exists()


@pytest.mark.database
def test_unregister(staff_client: Client, manager: ModelManager, model_root: Path) -> None:
    register(staff_client, model_root, "tiny")
    row = ModelRegistration.objects.get(name="tiny")
    staff_client.post(reverse("console:model-delete", args=[row.pk]))
    assert "tiny" not in {i.name for i in manager.list()}
    assert not ModelRegistration.objects.filter(name="tiny").exists()
    assert (AuditLog.objects.get(action="model.unregister").before or {})["source"].endswith("tiny")


@pytest.mark.database
def test_registrations_survive_a_new_process(
    staff_client: Client, manager: ModelManager, model_root: Path
) -> None:
    register(staff_client, model_root, "tiny", aliases="small")
    fresh = ModelManager(engine_factory=lambda config: cast(Any, SizedFakeEngine(config)))
    get_runtime().install_manager(fresh)
    try:
        # The page lists the saved model before the new process takes it up, and only reads.
        rows = ModelRegistration.objects.count()
        html = staff_client.get(reverse("console:models")).content.decode()
        assert 'data-model="tiny" data-state="available"' in html and not fresh.list()
        assert ModelRegistration.objects.count() == rows
        staff_client.post(reverse("console:model-load", args=["tiny"]))  # any model action syncs
        get_runtime().jobs.wait_all()
        assert next(i for i in fresh.list() if i.name == "tiny").aliases == ["small"]
        assert state(fresh, "tiny") == "loaded"
    finally:
        get_runtime().install_manager(manager)


@pytest.mark.parametrize("value", ["-1", "abc"])
def test_keep_alive_must_be_positive(
    staff_client: Client, manager: ModelManager, model_root: Path, value: str
) -> None:
    refused(staff_client, register(staff_client, model_root, "tiny", keep_alive_seconds=value))


@pytest.mark.database
def test_each_row_says_whether_the_model_runs_natively_and_how(
    staff_client: Client, manager: ModelManager, model_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gguf import GGMLQuantizationType

    from tests.inference.arch_files import CPU_BF16, gguf_file, hf_dir
    from webapp.core import native_paths

    monkeypatch.setattr(native_paths, "device_facts", lambda device, kernels: CPU_BF16)  # not this CPU
    register(staff_client, model_root, "tiny")  # a LlamaForCausalLM folder
    for name, path in (
        ("neox", hf_dir(model_root / "neox", "GPTNeoXForCausalLM")),
        ("q4", gguf_file(model_root / "q4.gguf", kind=GGMLQuantizationType.Q4_0)),
    ):
        data = {"name": name, "path": str(path), "aliases": "", "keep_alive_seconds": ""}
        assert staff_client.post(reverse("console:model-register"), data).status_code == 302

    def line(html: str, name: str) -> str:
        row = html[html.index(f'data-model="{name}"') :]
        row = row[: row.index("</tr>")]
        return row[row.index('<div class="muted native-path">') :].split(">", 1)[1].split("</div>", 1)[0]

    for page in ("console:models", "console:models-table"):
        html = staff_client.get(reverse(page)).content.decode()
        assert line(html, "tiny") == "native: LlamaForCausalLM, bf16 dense"
        assert line(html, "q4") == "native: LlamaForCausalLM, GGUF blocks read as stored"
        assert line(html, "neox") == (
            "not native: our engine does not run GPTNeoXForCausalLM (engine type transformers does)"
        )
