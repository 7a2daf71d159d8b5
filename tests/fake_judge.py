"""A tiny OpenAI-compatible chat-completions endpoint for tests: scripted replies, recorded requests.

    with FakeJudge(['{"correct": "yes", "extracted_final_answer": "Sihaven"}']) as judge:
        judge.base_url   # http://127.0.0.1:<port>/v1
        judge.requests   # [(path, headers, body), ...] as received

Each POST to ``/v1/chat/completions`` gets the next scripted reply as ``choices[0].message.content``
(the last one repeats); a reply that is an ``int`` is sent as that HTTP status with no choices.
Serves on 127.0.0.1 port 0 (a free one) from a daemon thread; ``close`` (or leaving the ``with``)
stops it.
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any


class FakeJudge:
    def __init__(self, replies: list[str | int]) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        judge = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                judge.requests.append((self.path, dict(self.headers), body))
                reply = judge.replies[min(len(judge.requests), len(judge.replies)) - 1]
                if isinstance(reply, int):
                    self._send(reply, {"error": {"message": "scripted failure"}})
                elif self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                else:
                    message = {"role": "assistant", "content": reply}
                    self._send(
                        200,
                        {
                            "id": "fake",
                            "object": "chat.completion",
                            "model": body.get("model"),
                            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        },
                    )

            def _send(self, status: int, data: Any) -> None:
                blob = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(blob)))
                self.end_headers()
                self.wfile.write(blob)

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def __enter__(self) -> FakeJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
