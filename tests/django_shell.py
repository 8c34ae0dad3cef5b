"""A Django shell that stays up: one JSON line `{"code": ...}` in, one `{"stdout", "error"}` line out.

The tests' `LiveDaphne.shell` runs snippets here against a live server's database (same environment as
the server), so making a user or a row costs a round trip rather than a Django start.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback


def main() -> None:
    import django

    django.setup()
    from django.db import connections

    replies = sys.stdout
    for line in sys.stdin:
        code = json.loads(line)["code"]
        printed = io.StringIO()
        error = None
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(code, "<snippet>", "exec"), {"__name__": "__snippet__"})
        except BaseException:  # the snippet's failure is the caller's to raise, with this traceback
            error = traceback.format_exc()
        finally:
            connections.close_all()
        replies.write(json.dumps({"stdout": printed.getvalue(), "error": error}) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
