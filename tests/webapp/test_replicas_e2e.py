"""Two real replicas behind nginx, sharing PostgreSQL and Redis, each with its own engine and the real
default model (tests/webapp/cluster.py): what a user or an admin sees is the same whichever answers."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.hub_server import bundled_model_repo, start_hub
from tests.services import postgres_skip_reason, redis_skip_reason
from tests.webapp.cluster import PASSWORD, Cluster, Http, read_json, start_cluster
from tests.webapp.nginx import nginx_skip_reason

pytestmark = [pytest.mark.replicas, pytest.mark.slow, pytest.mark.timeout(900)]

MIRROR = "mirror-org/SmolLM2-mirror"  # the bundled model, served by our stand-in hub
LONG_PROMPT = "Write a very long story about a lighthouse keeper and the sea, in many chapters."


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    reason = postgres_skip_reason() or redis_skip_reason() or nginx_skip_reason()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("replicas")
    hub = start_hub({MIRROR: bundled_model_repo(work / "hub" / MIRROR)})
    cluster = start_cluster(work, extra_env={"HF_ENDPOINT": hub.url, "HF_HOME": str(work / "hf-home")})
    cluster.manage_shell(
        "from django.contrib.auth.models import User\n"
        f"User.objects.create_user('alice', password={PASSWORD!r})\n"
        f"User.objects.create_user('root', password={PASSWORD!r}, is_staff=True, is_superuser=True)\n"
    )
    yield cluster
    cluster.stop()
    hub.stop()


def new_chat(cluster: Cluster, *, max_tokens: int = 1500) -> int:
    """Greedy: the story reply runs to max_tokens (it loops) rather than ending wherever sampling stops it,
    so it is still running when the tests restart, stop or kill things."""
    return int(
        cluster.manage_shell(
            "from django.contrib.auth.models import User\n"
            "from webapp.chat.services import conversation_create\n"
            "c = conversation_create(user=User.objects.get(username='alice'))\n"
            f"c.max_tokens = {max_tokens}\n"
            "c.temperature = 0.0\n"
            "c.save()\n"
            "print(c.pk)\n"
        )
    )


def api_key(cluster: Cluster, **limits: int) -> str:
    return cluster.manage_shell(
        "from django.contrib.auth.models import User\n"
        "from webapp.accounts.services import api_key_create\n"
        f"created = api_key_create(user=User.objects.get(username='alice'), **{limits!r})\n"
        "print(created.secret)\n"
    )


def replica_url(cluster: Cluster, name: str) -> str:
    return cluster.replicas[name].url


async def socket(cluster: Cluster, base: str, chat: int, session: Http) -> ClientConnection:
    ws_base = base.replace("http://", "ws://")
    return await connect(
        f"{ws_base}/ws/chat/{chat}/",
        origin=base,  # type: ignore[arg-type]
        additional_headers={"Cookie": f"sessionid={session.cookies['sessionid']}"},
        open_timeout=30,
    )


async def next_event(ws: ClientConnection, timeout: float = 60.0) -> dict[str, Any]:
    return dict(json.loads(await asyncio.wait_for(ws.recv(), timeout)))


async def until(ws: ClientConnection, predicate: Any, timeout: float = 120.0) -> list[dict[str, Any]]:
    """Events up to and including the first that satisfies `predicate`."""
    seen: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while True:
            event = await next_event(ws, timeout)
            seen.append(event)
            if predicate(event):
                return seen


def reply_row(cluster: Cluster, chat: int) -> tuple[str, str, str]:
    rows = cluster.query(
        "SELECT content, status, finish_reason FROM chat_message "
        "WHERE conversation_id = %s AND role = 'assistant' ORDER BY id DESC LIMIT 1",
        chat,
    )
    return rows[0] if rows else ("", "", "")


def reply_text(event: dict[str, Any]) -> str:
    """The assistant's text in an upsert event ("" for any other event, the user's message included)."""
    html = str(event.get("html", ""))
    if event.get("type") != "upsert" or "msg-assistant" not in html:
        return ""
    body = html.split('class="msg-body', 1)[-1]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", body.split(">", 1)[-1])).strip()


# ---- the API through nginx, and limits counted once for both replicas ---------------------------------


def test_sse_streams_token_by_token_through_nginx_from_both_replicas(cluster: Cluster) -> None:
    key = api_key(cluster)
    assert cluster.proxy is not None
    body = {
        "messages": [{"role": "user", "content": "Count from one to twenty in words."}],
        "max_tokens": 40,
        "temperature": 0,
        "ignore_eos": True,  # streaming is the subject, not where this greedy answer happens to end
        "stream": True,
    }
    for _ in range(4):  # round robin: each replica answers two
        conn = cluster.proxy.connection()
        started = time.monotonic()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        conn.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        response = conn.getresponse()
        assert response.status == 200
        arrivals = [
            time.monotonic() - started
            for line in response
            if line.startswith(b"data: {") and json.loads(line[6:])["choices"]
        ]
        conn.close()
        assert len(arrivals) > 10
        assert arrivals[0] < arrivals[-1] * 0.5  # spread over the generation, not one buffered burst
    for name in ("a", "b"):
        status, metrics = cluster.replicas[name].get("/metrics")
        found = re.search(rb"^mooncake:generation_tokens_total\{[^}]*\} (\S+)", metrics, re.M)
        assert status == 200 and found and float(found.group(1)) >= 40, name


def test_a_key_limit_holds_across_both_replicas(cluster: Cluster) -> None:
    key = api_key(cluster, requests_per_minute=3)
    statuses = []
    for name in ("a", "b", "a", "b", "a"):
        body = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}).encode()
        request = urllib_request(replica_url(cluster, name) + "/v1/chat/completions", body, key)
        statuses.append(request)
    # One budget of three for the key, whichever replica counts: three answers, then refusals on both.
    assert statuses == [200, 200, 200, 429, 429]


def urllib_request(url: str, body: bytes, key: str) -> int:
    request = urllib.request.Request(
        url, body, {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_stored_response_is_read_and_continued_on_the_other_replica(cluster: Cluster) -> None:
    key = api_key(cluster)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}

    def call(name: str, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(replica_url(cluster, name) + path, data, headers, method=method)
        with urllib.request.urlopen(request, timeout=120) as response:
            return dict(json.loads(response.read()))

    made = call("a", "POST", "/v1/responses", {"input": "Say hi.", "max_output_tokens": 4, "temperature": 0})
    assert call("b", "GET", f"/v1/responses/{made['id']}") == made  # PostgreSQL, not a process, holds it
    follow = {"input": "Again.", "previous_response_id": made["id"], "max_output_tokens": 2}
    assert call("b", "POST", "/v1/responses", follow)["previous_response_id"] == made["id"]
    assert call("b", "DELETE", f"/v1/responses/{made['id']}")["deleted"] is True
    with pytest.raises(urllib.error.HTTPError) as gone:
        call("a", "GET", f"/v1/responses/{made['id']}")
    assert gone.value.code == 404


# ---- a chat reply belongs to the conversation, not to a process -----------------------------------------


async def test_a_reply_on_a_is_watched_refused_and_stopped_from_b(cluster: Cluster) -> None:
    chat = new_chat(cluster)
    on_a = cluster.login(replica_url(cluster, "a"), "alice")
    on_b = cluster.login(replica_url(cluster, "b"), "alice")
    ws_a = await socket(cluster, on_a.base, chat, on_a)
    await until(ws_a, lambda e: e.get("type") == "state")
    await ws_a.send(json.dumps({"type": "send", "content": LONG_PROMPT}))
    await until(ws_a, lambda e: len(reply_text(e)) > 40)

    # A second tab, on b, gets the reply so far and then follows it live (through the channel layer).
    ws_b = await socket(cluster, on_b.base, chat, on_b)
    first = await until(ws_b, lambda e: e.get("type") == "state")
    assert first[-1] == {"type": "state", "running": True}
    live = await until(ws_b, lambda e: len(reply_text(e)) > 120)
    assert live
    # A page load on b does not take a's live reply for a dead one.
    status, _ = on_b.get(f"/chat/{chat}/")
    assert status == 200 and reply_row(cluster, chat)[1] == "streaming"
    # A second send while it runs is refused on b too.
    await ws_b.send(json.dumps({"type": "send", "content": "another"}))
    refused = await until(ws_b, lambda e: e.get("type") == "error")
    assert refused[-1]["code"] == "busy"

    # Stop on b stops the generation on a.
    await ws_b.send(json.dumps({"type": "stop"}))
    pressed = time.monotonic()
    await until(ws_a, lambda e: e == {"type": "state", "running": False}, timeout=30)
    stopped_after = time.monotonic() - pressed
    content, status_, finish = reply_row(cluster, chat)
    assert status_ == "stopped" and finish == "abort" and content
    assert stopped_after < 5.0
    await asyncio.sleep(1.0)
    assert reply_row(cluster, chat)[0] == content  # nothing generated after the stop
    user_messages = cluster.query(
        "SELECT count(*) FROM chat_message WHERE conversation_id = %s AND role = 'user'", chat
    )
    assert user_messages == [(1,)]  # the refused send saved nothing
    await ws_a.close()
    await ws_b.close()


async def test_a_reconnect_through_nginx_after_a_replica_restart_resumes_the_reply(cluster: Cluster) -> None:
    assert cluster.proxy is not None
    chat = new_chat(cluster)
    on_b = cluster.login(replica_url(cluster, "b"), "alice")
    ws_b = await socket(cluster, on_b.base, chat, on_b)  # the reply runs on b
    await until(ws_b, lambda e: e.get("type") == "state")
    await ws_b.send(json.dumps({"type": "send", "content": LONG_PROMPT}))
    await until(ws_b, lambda e: len(reply_text(e)) > 20)

    via_nginx = cluster.login(cluster.proxy.url, "alice")
    watcher = await socket(cluster, via_nginx.base, chat, via_nginx)
    await until(watcher, lambda e: e.get("type") == "state")
    cluster.stop_replica("a")  # the watcher's socket drops if nginx gave it to a
    cluster.start_replica("a", wait_model=False)
    await watcher.close()

    before = len(reply_row(cluster, chat)[0])
    again = await socket(cluster, via_nginx.base, chat, via_nginx)
    resumed = await until(again, lambda e: e.get("type") == "state", timeout=30)
    assert resumed[-1] == {"type": "state", "running": True}
    # The reply so far (rendered, so with its whitespace collapsed), then live.
    assert len(reply_text(resumed[0])) >= before * 0.9
    grew = await until(again, lambda e: len(reply_text(e)) > before + 40)
    assert grew
    await ws_b.send(json.dumps({"type": "stop"}))
    await until(again, lambda e: e == {"type": "state", "running": False}, timeout=30)
    await again.close()
    await ws_b.close()
    from tests.webapp.cluster import wait_ready

    wait_ready(cluster.replicas["a"], "/health")


async def test_a_replica_killed_mid_reply_leaves_it_interrupted_and_the_chat_usable(
    cluster: Cluster,
) -> None:
    chat = new_chat(cluster)
    on_a = cluster.login(replica_url(cluster, "a"), "alice")
    ws_a = await socket(cluster, on_a.base, chat, on_a)
    await until(ws_a, lambda e: e.get("type") == "state")
    await ws_a.send(json.dumps({"type": "send", "content": LONG_PROMPT}))
    await until(ws_a, lambda e: len(reply_text(e)) > 60)
    await asyncio.sleep(1.0)  # past the reply's first save (every 0.5 s)
    cluster.stop_replica("a", signal.SIGKILL)
    await asyncio.sleep(1.5)  # what the reply had saved
    saved, status_, _ = reply_row(cluster, chat)
    assert status_ == "streaming" and saved

    on_b = cluster.login(replica_url(cluster, "b"), "alice")
    # Once the dead replica's lease lapses (6 s here), b shows the reply stopped with its text so far.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        ws_b = await socket(cluster, on_b.base, chat, on_b)
        shown = await until(ws_b, lambda e: e.get("type") == "state")
        if shown[-1]["running"] is False:
            break
        await ws_b.close()
        await asyncio.sleep(1)
    assert shown[-1] == {"type": "state", "running": False}
    status, page = on_b.get(f"/chat/{chat}/")
    articles = re.findall(r'<article class="msg msg-assistant[^"]*".*?</article>', page.decode(), re.S)
    assert status == 200 and articles and "status-stopped" in articles[-1]
    shown_text = reply_text({"type": "upsert", "html": articles[-1]})
    words = re.findall(r"[A-Za-z]{3,}", saved)[:5]
    assert words and all(w in shown_text for w in words)  # the text it had saved
    # The chat is usable from b: regenerate answers again, keeping the interrupted reply as a version.
    await ws_b.send(json.dumps({"type": "regenerate"}))
    await until(ws_b, lambda e: e == {"type": "state", "running": True})
    await ws_b.send(json.dumps({"type": "stop"}))
    await until(ws_b, lambda e: e == {"type": "state", "running": False}, timeout=30)
    await ws_b.close()
    replies = cluster.query(
        "SELECT status, finish_reason FROM chat_message WHERE conversation_id = %s AND role = 'assistant'"
        " ORDER BY id",
        chat,
    )
    # The interrupted reply stays as an earlier version (1 of 2); the new one was stopped by the user.
    assert replies == [("stopped", "interrupted"), ("stopped", "abort")]
    cluster.start_replica("a")


# ---- model state, the dashboard and jobs ----------------------------------------------------------------


def wait_for(check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_console_model_actions_apply_on_every_replica(cluster: Cluster) -> None:
    admin_a = cluster.login(replica_url(cluster, "a"), "root")
    admin_b = cluster.login(replica_url(cluster, "b"), "root")
    name = cluster.query("SELECT name FROM console_modelregistration ORDER BY id LIMIT 1")[0][0]
    status, _ = admin_a.post(f"/console/models/{name}/unload/", {})
    assert status == 200
    assert wait_for(lambda: cluster.replicas["b"].get("/health")[0] == 503, 30)
    assert wait_for(lambda: cluster.replicas["a"].get("/health")[0] == 503, 30)
    status, _ = admin_b.post(f"/console/models/{name}/load/", {})
    assert status == 200
    assert wait_for(lambda: cluster.replicas["a"].get("/health")[0] == 200, 120)
    assert wait_for(lambda: cluster.replicas["b"].get("/health")[0] == 200, 120)
    # The Models page on either replica shows both replicas' states.
    html = wait_for(
        lambda: (
            page
            if 'data-replica="b" data-state="loaded"' in (page := admin_a.get("/console/models/")[1].decode())
            and 'data-replica="a" data-state="loaded"' in page
            else ""
        ),
        10,
    )
    assert html


def test_the_dashboard_shows_the_sum_and_each_replica(cluster: Cluster) -> None:
    admin = cluster.login(replica_url(cluster, "b"), "root")
    status, body = admin.get("/console/metrics/data/")
    data = read_json(body)
    assert status == 200
    assert sorted(r["name"] for r in data["replicas"]) == ["a", "b"]
    samples = [r["sample"] for r in data["replicas"] if r["sample"]]
    assert data["total"]["rss_mb"] == pytest.approx(sum(s["rss_mb"] for s in samples), rel=0.5)


def test_setup_page_is_gone_once_an_admin_exists_on_both(cluster: Cluster) -> None:
    for name in ("a", "b"):
        assert cluster.replicas[name].get("/setup/")[0] == 404


LAST_JOB = "SELECT state, message FROM console_consolejob ORDER BY id DESC LIMIT 1"


def model_states(cluster: Cluster, replica: str, key: str) -> dict[str, str]:
    """/health's models: API keys are required here, and only a caller with one is shown them."""
    request = urllib.request.Request(
        replica_url(cluster, replica) + "/health", headers={"Authorization": f"Bearer {key}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:  # a 503 while the default model is not ready still lists them
        body = exc.read()
    except OSError:  # a replica busy loading a model on a loaded 2-core machine: ask again
        return {}
    return {m["name"]: m["state"] for m in read_json(body).get("models", [])}


def test_a_hub_import_runs_on_the_worker_and_every_replica_serves_the_model(cluster: Cluster) -> None:
    admin_a = cluster.login(replica_url(cluster, "a"), "root")
    admin_b = cluster.login(replica_url(cluster, "b"), "root")
    status, _ = admin_a.post("/console/models/import/", {"repo_id": MIRROR})
    assert status == 200  # redirected to the jobs page
    job = wait_for(
        lambda: (rows := cluster.query(LAST_JOB)) and rows[0][0] in ("succeeded", "failed") and rows[0],
        180,
    )
    worker_log = (cluster.work / "worker.log").read_text(errors="replace")[-3000:]
    assert job and job[0] == "succeeded", f"{job}\n{worker_log}"
    assert "console.import_hf_model" in worker_log  # run by the worker process, through Redis
    name = MIRROR  # an import is served under its hub id, as a model set in mooncake.yaml is
    key = api_key(cluster)

    def listed(replica: str) -> bool:
        request = urllib.request.Request(
            replica_url(cluster, replica) + "/v1/models", headers={"Authorization": f"Bearer {key}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return name in {m["id"] for m in json.loads(response.read())["data"]}

    assert wait_for(lambda: listed("a") and listed("b"), 15)  # the worker's announcement reached both
    status, _ = admin_b.post(f"/console/models/{name}/load/", {})
    assert status == 200
    body = json.dumps(
        {"model": name, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4}
    ).encode()
    # Loaded on both: b by the admin, a by its sync, without anyone asking a for it.
    loaded = wait_for(lambda: model_states(cluster, "a", key).get(name) == "loaded", 180)
    assert loaded, model_states(cluster, "a", key)
    for replica in ("a", "b"):
        url = replica_url(cluster, replica) + "/v1/chat/completions"
        status = wait_for(lambda u=url: (code := urllib_request(u, body, key)) != 503 and code, 180)
        assert status == 200, replica
    alias = {"model": MIRROR.split("/")[1], "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    short = json.dumps(alias).encode()
    assert urllib_request(replica_url(cluster, "b") + "/v1/chat/completions", short, key) == 200  # its alias
