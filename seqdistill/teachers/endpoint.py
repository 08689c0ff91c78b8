"""An OpenAI-compatible completions endpoint (vLLM, SGLang, llama.cpp's server, a hosted API), as the
server teacher calls it (``server.py``, issue 55): requests with retries and back-off, and a journal
of every answer, so that a killed run asks nothing twice.

Decisions, named here:

* **httpx**, the well-kept HTTP client (the ``endpoint`` extra), one connection pool shared by the
  threads that send requests (``max_concurrency`` of them at most: ``server.py`` bounds them).
* **Retried**: a timeout, a refused or dropped connection, 408, 429 and every 5xx, and an answer
  that is not JSON or not a completion (a proxy cutting the body). The wait is the answer's
  ``Retry-After`` (seconds) when it gives one, else ``backoff`` seconds doubled at each try (0.5,
  1, 2, 4, 8 by default), capped at 60. After ``retries`` tries the error names the endpoint, what
  it answered last, and what to do. Other 4xx answers (a wrong model name, a bad key) are not
  retried: they name the endpoint and quote its message.
* **The journal** is ``answers.jsonl`` in the teacher's directory: one line per answer, ``{"key":
  sha256 of the request body as canonical JSON, "answer": the JSON answer}``, written and flushed
  before the answer is used. A line cut short by a kill (the last one only) is ignored and asked
  again; any other line that does not parse is refused, naming the line. The key holds everything
  the answer depends on (model name, prompt, every parameter), not the URL: the same model served
  elsewhere gives the same answers. An answer is kept only once it has been read without error: a
  malformed one is asked again by the next run, never replayed.
* **The key** comes from the environment variable the teacher names (``OPENAI_API_KEY`` by default),
  never from a file: the teacher directory is shared with caches and must not hold a secret.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .base import TeacherError

ANSWERS = "answers.jsonl"
RETRY_STATUS = {408, 429} | set(range(500, 600))


class EndpointError(TeacherError):
    """An endpoint that cannot give an answer, with what it said and what to do."""


@dataclass
class EndpointConfig:
    """Where the server teacher's LM answers, and how patiently it is asked."""

    url: str  # the API's base, e.g. http://127.0.0.1:8080/v1 (the path /completions is added)
    model: str  # the model name the server knows
    api_key_env: str = "OPENAI_API_KEY"  # the environment variable holding the key (none needed locally)
    max_concurrency: int = 8  # requests in flight at most
    timeout: float = 120.0  # seconds a request may take
    retries: int = 5  # tries after the first, for what is retried (module docstring)
    backoff: float = 0.5  # seconds before the first retry, doubled at each
    echo_offset: int = 0  # how late the server's echo log-probabilities come (server.align_echo finds it)

    def to_json(self) -> dict:
        return dict(self.__dict__)


class Answers:
    """The journal of answers (module docstring): read whole when opened, appended under a lock."""

    def __init__(self, path: Path):
        self.path, self._lock, self._seen = Path(path), threading.Lock(), {}
        if self.path.is_file():
            lines = self.path.read_bytes().split(b"\n")
            for n, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                    self._seen[obj["key"]] = obj["answer"]
                except (ValueError, KeyError, TypeError):
                    if n == len(lines) or (n == len(lines) - 1 and not lines[-1]):
                        continue  # the last line, cut short by a kill: asked again
                    raise EndpointError(
                        f"{self.path}:{n}: not an answer line; remove the file to ask the server again"
                    ) from None

    def __len__(self) -> int:
        return len(self._seen)

    def get(self, key: str):
        return self._seen.get(key)

    def put(self, key: str, answer: dict) -> None:
        line = json.dumps({"key": key, "answer": answer}, ensure_ascii=False, separators=(",", ":")) + "\n"
        with self._lock:
            if key in self._seen:
                return
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
            self._seen[key] = answer


def request_key(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class Endpoint:
    """``complete(body)``: the answer to a ``/completions`` request, from the journal or the server."""

    def __init__(self, cfg: EndpointConfig, answers: Answers, sleep=time.sleep):
        try:
            import httpx
        except ImportError:
            raise EndpointError("a server teacher needs httpx: pip install 'seqdistill[endpoint]'") from None
        self.cfg, self.answers, self.sleep = cfg, answers, sleep
        key = os.environ.get(cfg.api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        limits = httpx.Limits(max_connections=cfg.max_concurrency)
        self.http = httpx.Client(timeout=cfg.timeout, headers=headers, limits=limits)
        self.asked = 0  # requests that reached the server (answers from the journal are not counted)

    def close(self) -> None:
        self.http.close()

    def complete(self, body: dict, read=None):
        """The answer to ``body`` (``read(answer)`` of it, when given: a reader that raises on a
        malformed answer, which is then not kept in the journal)."""
        key = request_key({"model": self.cfg.model, **body})
        answer = self.answers.get(key)
        fresh = answer is None
        if fresh:
            answer = self._ask({"model": self.cfg.model, **body})
        value = read(answer) if read is not None else answer
        if fresh:
            self.answers.put(key, answer)
        return value

    def _ask(self, body: dict) -> dict:
        import httpx

        url = self.cfg.url.rstrip("/") + "/completions"
        last = "no answer"
        for attempt in range(self.cfg.retries + 1):
            wait = min(60.0, self.cfg.backoff * 2**attempt)
            try:
                self.asked += 1
                r = self.http.post(url, json=body)
            except httpx.TimeoutException:
                last = f"no answer within {self.cfg.timeout:g} s"
            except httpx.TransportError as e:
                last = f"connection failed ({type(e).__name__}: {e})"
            else:
                if r.status_code == 200:
                    answer = _completion(r)
                    if answer is not None:
                        return answer
                    last = f"an answer that is not a completion: {r.text[:200]!r}"
                elif r.status_code in RETRY_STATUS:
                    last = f"HTTP {r.status_code}: {r.text[:200]}"
                    wait = _retry_after(r, wait)
                else:
                    raise EndpointError(
                        f"{url}: HTTP {r.status_code}: {r.text[:300]} (check --model {self.cfg.model!r} and the key in "
                        f"${self.cfg.api_key_env})"
                    )
            if attempt < self.cfg.retries:
                self.sleep(wait)
        raise EndpointError(
            f"{url}: {last}, after {self.cfg.retries + 1} tries; is the server up and serving {self.cfg.model!r}? "
            "Run the same command again once it is: what it answered is kept"
        )


def _completion(r) -> dict | None:
    """The JSON answer when it is a completion (a ``choices`` list), else None."""
    try:
        answer = r.json()
    except ValueError:
        return None
    if not isinstance(answer, dict) or not isinstance(answer.get("choices"), list) or not answer["choices"]:
        return None
    return answer


def _retry_after(r, default: float) -> float:
    value = r.headers.get("retry-after")
    try:
        return min(60.0, max(0.0, float(value))) if value is not None else default
    except ValueError:
        return default  # an HTTP date: the back-off instead
