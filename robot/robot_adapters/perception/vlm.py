"""A vision-language endpoint for open questions about what a robot sees (``probe``,
``scan_abstract``): any OpenAI-compatible ``/v1/chat/completions`` server that takes images
(``vllm serve`` with a vision-language model hosts one).

The frame goes as a JPEG data URL in the user message, the answer comes back as a few words,
bounded and stripped of control characters before it reaches a plan, a status or a log.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from robot_adapters.perception.types import PerceptionError

MAX_ANSWER_CHARS = 200
PROMPT = "Answer in a few words, from what this robot camera image shows. Question: {q}"


class VisionLanguageEndpoint:
    """``ask(image, question)`` through ``POST {url}/v1/chat/completions``."""

    def __init__(self, url: str, model: str, *, timeout_s: float = 20.0, api_key: str = "") -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"perception.vlm.url {url!r} is not an http:// or https:// URL")
        self.url = url.rstrip("/")
        self.model = model
        self.timeout_s = float(timeout_s)
        self.api_key = api_key

    def ask(self, image: Any, question: str) -> str:
        import httpx
        from PIL import Image

        buf = io.BytesIO()
        Image.fromarray(image).convert("RGB").save(buf, format="JPEG", quality=85)
        data_url = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
        body = {"model": self.model, "temperature": 0.0, "max_tokens": 48, "messages": [{
            "role": "user", "content": [{"type": "text", "text": PROMPT.format(q=question[:500])},
                                        {"type": "image_url", "image_url": {"url": data_url}}]}]}
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            r = httpx.post(f"{self.url}/v1/chat/completions", json=body, headers=headers, timeout=self.timeout_s)
            r.raise_for_status()
            text = r.json()["choices"][0]["message"]["content"]
        except httpx.HTTPStatusError as e:
            raise PerceptionError(f"the vision-language endpoint {self.url} answered HTTP "
                                  f"{e.response.status_code}") from None
        except (httpx.HTTPError, OSError) as e:
            raise PerceptionError(f"the vision-language endpoint {self.url} does not answer "
                                  f"({type(e).__name__})") from None
        except (KeyError, IndexError, TypeError, ValueError):
            raise PerceptionError(f"the vision-language endpoint {self.url} gave no chat answer") from None
        answer = " ".join(str(text).split())[:MAX_ANSWER_CHARS]
        return "".join(ch for ch in answer if ch.isprintable()) or "unknown"
