"""`probe` through an OpenAI-compatible vision-language endpoint: the request a vLLM server
expects (a JPEG data URL beside the question), the answer bounded, failures one sentence."""

from __future__ import annotations

import base64
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from PIL import Image

from robot_adapters.perception.types import PerceptionError
from robot_adapters.perception.vlm import MAX_ANSWER_CHARS, VisionLanguageEndpoint


class ChatServer:
    """A loopback server speaking /v1/chat/completions; records requests, answers ``answer``."""

    def __init__(self, answer, status=200):
        self.requests = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, body))
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": answer}}]}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_the_frame_goes_as_a_jpeg_and_the_answer_comes_back_bounded():
    srv = ChatServer("  A red\n cup \x07on the table " + "x" * 500)
    try:
        img = np.zeros((60, 80, 3), np.uint8)
        img[:, :40] = (255, 0, 0)
        answer = VisionLanguageEndpoint(srv.url, "some-vlm").ask(img, "what is on the table?")
        assert answer.startswith("A red cup on the table") and len(answer) <= MAX_ANSWER_CHARS
        assert "\x07" not in answer
        path, body = srv.requests[0]
        assert path == "/v1/chat/completions" and body["model"] == "some-vlm"
        parts = body["messages"][0]["content"]
        assert "what is on the table?" in parts[0]["text"]
        url = parts[1]["image_url"]["url"]
        assert url.startswith("data:image/jpeg;base64,")
        sent = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))))
        assert sent.shape == (60, 80, 3) and sent[30, 10, 0] > 200 and sent[30, 70, 0] < 50
    finally:
        srv.close()


def test_failures_are_one_sentence():
    srv = ChatServer("x", status=500)
    try:
        with pytest.raises(PerceptionError, match="answered HTTP 500"):
            VisionLanguageEndpoint(srv.url, "m").ask(np.zeros((8, 8, 3), np.uint8), "q")
    finally:
        srv.close()
    with pytest.raises(PerceptionError, match="does not answer"):
        VisionLanguageEndpoint("http://127.0.0.1:9", "m", timeout_s=2).ask(np.zeros((8, 8, 3), np.uint8), "q")
    with pytest.raises(ValueError, match="not an http"):
        VisionLanguageEndpoint("ftp://x", "m")
