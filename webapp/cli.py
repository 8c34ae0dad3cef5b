"""The `mooncake` command: serve (migrate, then Daphne and a Celery worker), check, models."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from webapp.processes import Supervisor, port_taken, wait_for_port, worker_command

PORT_WAIT_SECONDS = 60.0
# After the server's own drain timeout, how long to wait before killing a child that will not stop.
STOP_GRACE_SECONDS = 15.0


def _select_settings(config: str | None, settings_module: str | None) -> None:
    if config:
        path = Path(config).expanduser().resolve()
        if not path.is_file():
            raise SystemExit(f"mooncake: config file {path} does not exist")
        os.environ["MOONCAKE_CONFIG"] = str(path)
    if settings_module:
        os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings.local")


def _setup_django(config: str | None, settings_module: str | None) -> None:
    _select_settings(config, settings_module)
    import django

    django.setup()


def _secure_for_bind(host: str) -> None:
    """Before Django reads the environment (the children inherit it): a bind others can reach gets DEBUG
    off and API keys required, or the start is refused with the reason."""
    from webapp.core.serve_safety import UnsafeBindError, exposed_bind_env

    try:
        forced = exposed_bind_env(host, os.environ)
    except UnsafeBindError as exc:
        raise SystemExit(f"mooncake: {exc}") from None
    if forced:
        os.environ.update(forced)
        print(f"mooncake: {host} is reachable from other machines: DEBUG off, API keys required", flush=True)


def cmd_serve(args: argparse.Namespace) -> int:
    _select_settings(args.config, args.settings)
    from webapp.core.config import resolve_settings

    # The bind decides the settings, so it is read before them: --host, else server.host in mooncake.yaml.
    host = args.host or resolve_settings().server.host
    _secure_for_bind(host)
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from webapp.core.selectors import users_exist
    from webapp.core.serve_safety import make_private, sqlite_file
    from webapp.core.setup_access import log_setup_link

    make_private(settings.DATA_DIR, sqlite_file(settings.DATABASES["default"]))
    call_command("migrate", interactive=False, verbosity=0)
    port = int(args.port or settings.MOONCAKE["server"]["port"])
    taken = port_taken(host, port)
    if taken is not None:  # said once, before anything starts, rather than after a banner
        raise SystemExit(
            f"mooncake: cannot listen on {host}:{port}: {taken.strerror} (is another server there?)"
        )
    commands = {
        "server": [sys.executable, "-m", "webapp.serving.server", "--host", host, "--port", str(port)],
    }
    if not args.no_worker:
        commands["worker"] = worker_command()
    supervisor = Supervisor(commands, stop_timeout=lambda: _drain_timeout() + STOP_GRACE_SECONDS)
    signal.signal(signal.SIGINT, supervisor.on_signal)
    signal.signal(signal.SIGTERM, supervisor.on_signal)
    supervisor.start()
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    if wait_for_port(host, port, supervisor.children["server"], PORT_WAIT_SECONDS):
        url = f"http://{shown_host}:{port}/"
        print(f"\n  Mooncake is running at {url}", flush=True)
        if users_exist():
            print("  Log in with your account. (Forgot the password? python manage.py changepassword NAME)")
        else:
            print("  First visit: the page asks you to create the administrator account.", flush=True)
            log_setup_link(url)  # from another machine the page needs this link's token
        if settings.MOONCAKE_API_AUTH == "required":
            print(f"  The API at {url}v1 needs a key (Authorization: Bearer <key>): an admin creates keys")
            print(f"  on {url}console/users/ (a user's page, Keys).", flush=True)
        print(f"  The model loads in the background; {url}health turns 200 when it is ready.")
        print("  Ctrl-C stops everything.\n", flush=True)
    return supervisor.wait()


def _drain_timeout() -> float:
    """The server's drain timeout (the console's override, else the configured one)."""
    from django.conf import settings
    from django.db import DatabaseError

    from webapp.core.engine_settings import drain_timeout

    try:
        return drain_timeout()
    except DatabaseError:
        return float(settings.MOONCAKE_DRAIN_TIMEOUT)


def cmd_check(args: argparse.Namespace) -> int:
    _setup_django(args.config, args.settings)
    from django.conf import settings
    from django.core.management import call_command

    from webapp.serving.config_report import config_report

    call_command("check")
    print(f"settings:     {os.environ['DJANGO_SETTINGS_MODULE']}")
    print(f"config file:  {settings.MOONCAKE_CONFIG_PATH or '(none; defaults)'}")
    print(f"database:     {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}")
    print(f"celery:       {settings.CELERY_BROKER_URL}")
    print("precedence:   default < env < yaml < console (the console's tuning page and Models rows)")
    report = config_report()
    for line in report.lines:
        print(line)
    problems = list(report.problems)
    for root in settings.MODEL_ROOTS:
        print(f"model root:   {root}{'' if root.is_dir() else '  (missing; created on first upload)'}")
    for problem in problems:
        print(f"PROBLEM: {problem}", file=sys.stderr)
    print("OK" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


def _live_models(host: str, port: int) -> list[dict[str, Any]] | None:
    probe_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    try:
        with urllib.request.urlopen(f"http://{probe_host}:{port}/health", timeout=3) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()  # 503 still carries the model states
    except OSError:
        return None
    models = json.loads(body).get("models", [])
    return models if isinstance(models, list) else []


def cmd_models(args: argparse.Namespace) -> int:
    _setup_django(args.config, args.settings)
    from django.conf import settings

    from webapp.core.hub_models import parse_hub_id
    from webapp.core.model_list import listed_models, source_of
    from webapp.core.modelpaths import check_source
    from webapp.serving.config_report import describe_hub

    mooncake = settings.MOONCAKE
    print("Configured:")
    for listed in listed_models(mooncake):
        source = source_of(mooncake, listed)
        mark = "  (default)" if listed.default else ""
        hub = parse_hub_id(source)
        if hub is not None and not check_source(source).path:
            line, problem = describe_hub(hub)
            print(f"  {listed.name}{mark}  {line}  {problem or ''}".rstrip())
            continue
        check = check_source(source)
        print(f"  {listed.name}{mark}  {check.path or source}  {check.problem or ''}".rstrip())
    host = args.host or str(mooncake["server"]["host"])
    port = int(args.port or mooncake["server"]["port"])
    live = _live_models(host, port)
    if live is None:
        print(f"Server: not running at {host}:{port}")
        return 0
    print(f"Server at {host}:{port}:")
    for model in live:
        error = f"  {model['error']}" if model.get("error") else ""
        print(f"  {model['name']}  {model['state']}{error}")
    if not live:
        print("  (no models registered)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mooncake", description="Self-hosted LLM serving.")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help="mooncake.yaml (default: $MOONCAKE_CONFIG or ./mooncake.yaml)")
        p.add_argument("--settings", help="Django settings module (default: webapp.settings.local)")

    serve = sub.add_parser("serve", help="migrate, then run the web server and a Celery worker")
    common(serve)
    serve.add_argument("--host", help="bind address (default: server.host from the config, else 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: server.port from the config, else 8000)")
    serve.add_argument("--no-worker", action="store_true", help="do not start a Celery worker")
    serve.set_defaults(func=cmd_serve)

    check = sub.add_parser("check", help="check settings and model paths")
    common(check)
    check.set_defaults(func=cmd_check)

    models = sub.add_parser("models", help="list configured models and, if the server runs, their state")
    common(models)
    models.add_argument("--host")
    models.add_argument("--port", type=int)
    models.set_defaults(func=cmd_models)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from django.core.exceptions import ImproperlyConfigured

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ImproperlyConfigured as exc:
        # A setting the operator wrote: one line naming it, not Django's traceback through the settings.
        print(f"mooncake: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
