"""The names a model is served under when mooncake.yaml gives none: a hub id as configured (its short name
an alias), a Hugging Face cache snapshot as the repository it came from, anything else after itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webapp.core.model_list import listed_models
from webapp.core.model_names import MAX_NAME_CHARS, ServedNames, names_from_source, repo_names

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _single(**model: Any) -> dict[str, dict[str, Any]]:
    return {"model": model, "engine": {}, "server": {}}


def test_a_hub_id_is_served_under_itself_with_its_short_name_an_alias() -> None:
    assert names_from_source("HuggingFaceTB/SmolLM2-135M-Instruct") == ServedNames(
        "HuggingFaceTB/SmolLM2-135M-Instruct", ("SmolLM2-135M-Instruct",)
    )
    # A pinned revision: the repo id, and what was configured answers too.
    assert names_from_source("org/name:v1") == ServedNames("org/name", ("name", "org/name:v1"))
    assert names_from_source("org/repo/sub/model.Q4.gguf") == ServedNames(
        "org/repo/sub/model.Q4.gguf", ("model.Q4",)
    )


def test_a_cache_snapshot_is_named_after_its_repository_not_its_commit(tmp_path: Path) -> None:
    snapshot = tmp_path / "hub" / "models--HuggingFaceTB--SmolLM2-135M-Instruct" / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    expected = ServedNames("HuggingFaceTB/SmolLM2-135M-Instruct", ("SmolLM2-135M-Instruct",))
    assert names_from_source(str(snapshot)) == expected
    assert names_from_source(f"{snapshot}/") == expected
    gguf = snapshot / "q4" / "model.Q4_0.gguf"
    assert names_from_source(str(gguf)) == ServedNames(
        "HuggingFaceTB/SmolLM2-135M-Instruct/q4/model.Q4_0.gguf", ("model.Q4_0",)
    )
    # A repository without an organisation ("gpt2") has no shorter name.
    assert names_from_source(f"/c/hub/models--gpt2/snapshots/{COMMIT}") == ServedNames("gpt2")


def test_other_sources_keep_their_own_names(tmp_path: Path) -> None:
    assert names_from_source("default") == ServedNames("SmolLM2-135M-Instruct")
    assert names_from_source("/models/Qwen2-0.5B") == ServedNames("Qwen2-0.5B")
    assert names_from_source("/m/tiny.Q8_0.gguf") == ServedNames("tiny.Q8_0")
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert names_from_source(str(tmp_path / "org" / "name")) == ServedNames("name")  # a folder, not a hub id
    # A folder inside a snapshot that is not the snapshot is named after itself.
    inner = f"/c/models--org--name/snapshots/{COMMIT}/sub"
    assert names_from_source(inner) == ServedNames("sub")


def test_an_id_too_long_to_record_is_an_alias_of_the_short_name() -> None:
    org, name = "o" * 60, "n" * 60
    assert len(f"{org}/{name}") > MAX_NAME_CHARS
    assert names_from_source(f"{org}/{name}") == ServedNames(name, (f"{org}/{name}",))


def test_the_single_form_lists_the_hub_id_with_derived_and_configured_aliases() -> None:
    hub = "HuggingFaceTB/SmolLM2-135M-Instruct"
    (model,) = listed_models(_single(model_id=hub, aliases=["smol", "SmolLM2-135M-Instruct", hub]))
    assert model.name == hub
    assert model.aliases == ("SmolLM2-135M-Instruct", "smol")
    # model.name is the user's choice: served under it alone, with their aliases.
    (named,) = listed_models(_single(model_id=hub, name="chat", aliases=["c"]))
    assert (named.name, named.aliases) == ("chat", ("c",))
    snapshot = f"/cache/models--HuggingFaceTB--SmolLM2-135M-Instruct/snapshots/{COMMIT}"
    (local,) = listed_models(_single(model_path=snapshot))
    assert (local.name, local.aliases) == (hub, ("SmolLM2-135M-Instruct",))


def test_a_downloaded_repo_is_named_as_its_hub_id_even_where_a_folder_has_that_path(
    tmp_path: Path, monkeypatch: Any
) -> None:
    assert repo_names("HuggingFaceTB/SmolLM2-135M-Instruct") == names_from_source(
        "HuggingFaceTB/SmolLM2-135M-Instruct"
    )
    assert repo_names(f"{'o' * 60}/{'n' * 60}") == ServedNames("n" * 60, (f"{'o' * 60}/{'n' * 60}",))
    (tmp_path / "org" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)  # "org/name" is a folder here: names_from_source names it as one
    assert names_from_source("org/name") == ServedNames("name")
    assert repo_names("org/name") == ServedNames("org/name", ("name",))
