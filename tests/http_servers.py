"""The tests' small HTTP servers (fake boards, webhook receivers, OpenID stubs) share one
rule: a client that leaves before the answer (an agent's timeout, a board that stops
reading an oversized body) is no error. http.server printed a BrokenPipeError or
ConnectionResetError traceback for each, into the test log, for tests that passed."""

from __future__ import annotations

import sys
import threading
from http.server import ThreadingHTTPServer
from typing import Any


class QuietHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that lets a departed client go quietly; any other error of a
    handler is still printed. Counts the requests it has finished with (`done`)."""

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.done = 0
        self._done_lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipe, ConnectionReset
            return
        super().handle_error(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        super().shutdown_request(request)
        with self._done_lock:
            self.done += 1
