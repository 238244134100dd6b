"""The one client of the HTTP admin port that this project's own readers use (bk bench reading
/metrics, the tests): a request over HTTP, or HTTPS trusting a CA file, carrying the cluster's
secret as "Authorization: Bearer <secret>" when the reader has one (bktransports.http_admin asks
for it). Blocking, on urllib: trio callers run it in a thread.

    status, text = admin_request(f"https://127.0.0.1:{port}/metrics", auth_secret=secret, tls_ca=ca)

Any answer comes back as (status, text), a refusal (401) too; a port that cannot be reached
raises OSError.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

from bktransports.auth import bearer

TIMEOUT_S = 5.0


def admin_request(url: str, *, method: str = "GET", body: dict | None = None, auth_secret: bytes = b"",
                  tls_ca: str | None = None, timeout_s: float = TIMEOUT_S) -> tuple[int, str]:
    """(status, text of the answer) of one request; body: sent as a JSON object."""
    headers = {"Authorization": bearer(auth_secret)} if auth_secret else {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    context = ssl.create_default_context(cafile=tls_ca) if tls_ca else None
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as answer:        # (an answer, not a failure to get one)
        with answer:
            return answer.code, answer.read().decode()
