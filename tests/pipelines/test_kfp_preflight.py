"""The KFP preflight never hands the bearer token or cookies to another host a redirect names."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ctpipe.pipelines.deploy import kfp_client


@contextmanager
def http_server(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirect_to_another_host_gets_neither_the_token_nor_the_cookies():
    seen: list[dict[str, str]] = []

    class Elsewhere(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen.append(dict(self.headers))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    with http_server(Elsewhere) as elsewhere:
        class Redirecting(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self.send_response(302)  # e.g. an auth proxy sending the client to an external login page
                self.send_header("Location", f"{elsewhere}/login")
                self.end_headers()

            def log_message(self, *args):
                pass

        with http_server(Redirecting) as kfp_host:
            kfp_client._preflight(kfp_host, "s3cret-token", "session=s3cret-cookie")
    assert not any("s3cret" in value for headers in seen for value in headers.values()), seen
