"""What the backend tests share (tests/test_backend_contract.py, tests/test_backend_details.py): three LoCoMo-like
messages and one request of each kind over them, SmolLM2's LLM config, and a fake OpenAI-compatible HTTP server.
The module-scoped `llamacpp_backend` and `openai_fake_server` fixtures are in tests/conftest.py."""
from __future__ import annotations

import json
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fake_vllm
from membox_local.backends.base import JsonRequest, LabelRequest, TextRequest
from membox_local.config import LLMConfig, load_config
from membox_local.prompts import CONTINUITY_LABELS, answer_prompt, continuity_prompt, extract_prompt, extract_schema
from membox_local.records import Message

MSGS = [Message("c", "1", "Ann", "I adopted a cat named Milo yesterday."),
        Message("c", "2", "Bob", "Nice! What colour is Milo?"),
        Message("c", "3", "Ann", "He is orange and sleeps all day.")]
SCHEMA = extract_schema(load_config("cpu-fast").extract, 3)


def label_req(logprobs=False, n=1):
    return LabelRequest(continuity_prompt(MSGS[:n], MSGS[n]), CONTINUITY_LABELS, "judge", logprobs)


def json_req(n=2):
    return JsonRequest(extract_prompt(MSGS[:n], "1 May 2024"), SCHEMA, "extract", max_tokens=200)


def text_req(q="What is the cat called?"):
    return TextRequest(answer_prompt("\n".join(m.render() for m in MSGS), q), "answer", max_tokens=16)



def smollm_cfg(**kw) -> LLMConfig:
    cfg = load_config("cpu-fast").llm
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


# ---- a fake OpenAI-compatible HTTP server ------------------------------------------------------------
class FakeOpenAIServer:
    """Honours response_format (json_schema), logprobs and usage; `script` queues HTTP error codes. With "stream",
    answers in Server-Sent Events, one chunk per word, usage in a last chunk when stream_options.include_usage asks
    for it and `stream_usage` (False: a server that ignores stream_options)."""

    def __init__(self, delay_s: float = 0.0):
        self.requests: list[dict] = []
        self.stream_usage = True
        self.script: list[int] = []
        self.delay_s = delay_s
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append(body)
                    status = outer.script.pop(0) if outer.script else 200
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                time.sleep(outer.delay_s)
                with outer.lock:
                    outer.in_flight -= 1
                if status != 200:
                    return self._send(status, {"error": {"message": f"scripted {status}", "type": "test"}})
                if body.get("stream"):
                    return self._send_events(outer.chunks(body))
                self._send(200, outer.answer(body))

            def _send_events(self, chunks):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")

            def _send(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def answer(self, body: dict) -> dict:
        text = json.dumps(body["messages"])
        seed = zlib.crc32(text.encode())
        logprobs = None
        fmt = body.get("response_format")
        if fmt:
            schema = fmt["json_schema"]["schema"]
            content = json.dumps(fake_vllm.minimal_instance(schema, seed))
            if body.get("logprobs"):
                labels = schema["properties"]["label"]["enum"]
                value = json.loads(content)["label"]
                top = [{"token": label[:2], "logprob": -0.1 if label == value else -2.0 - i}
                       for i, label in enumerate(labels)]
                toks = ['{"', 'label', '":"', value[:2], value[2:], '"}']
                logprobs = {"content": [{"token": t, "logprob": -0.1, "top_logprobs": top if t == value[:2] else []}
                                        for t in toks]}
        else:
            content = "a short fake answer"
        return {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "logprobs": logprobs,
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": len(text.split()), "completion_tokens": len(content.split()),
                          "total_tokens": 0}}

    def chunks(self, body: dict) -> list[dict]:
        """The streamed form of `answer`: the content one word at a time (a space before every word but the
        first), then the finish reason, then the usage when asked and given."""
        whole = self.answer(body)
        words = whole["choices"][0]["message"]["content"].split(" ")
        head = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
        out = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": w if i == 0 else " " + w},
                                     "finish_reason": None}]} for i, w in enumerate(words)]
        out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if self.stream_usage and (body.get("stream_options") or {}).get("include_usage"):
            out.append({**head, "choices": [], "usage": whole["usage"]})
        return out

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
