"""Checks `spillway serve` with OpenAI's own Python client and raw HTTP.

Run by tests/e2e/serve_test.cc against a server it started on a tiny model:
    openai_client_check.py BASE_URL API_KEY CONTEXT
Prints one line per check and ends with 'N passed, N failed'; exits 1 when
any check failed.
"""
import concurrent.futures
import http.client
import json
import socket
import struct
import sys
import time
import urllib.parse

from openai import OpenAI

BASE, KEY, CONTEXT = sys.argv[1], sys.argv[2], int(sys.argv[3])
URL = urllib.parse.urlparse(BASE)
client = OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=120)
results = []


def check(name):
    def run(fn):
        try:
            fn()
            results.append((name, None))
            print("ok", name, flush=True)
        except Exception as e:  # a failed check is reported, not fatal
            results.append((name, e))
            print("FAILED", name, "-", repr(e), flush=True)
        return fn
    return run


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def raw(method, path, body=None, key=KEY, headers=None):
    conn = http.client.HTTPConnection(URL.hostname, URL.port, timeout=60)
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    h.update(headers or {})
    conn.request(method, path, body=body, headers=h)
    r = conn.getresponse()
    data = r.read().decode()
    conn.close()
    return r.status, data


def expect_error(status, data, want_status, param=None, code=None):
    expect(status == want_status, f"status {status}, wanted {want_status}: {data}")
    err = json.loads(data)["error"]
    expect(isinstance(err["message"], str) and err["message"], data)
    expect(err["type"] in ("invalid_request_error", "server_error"), data)
    if param is not None:
        expect(err["param"] == param, f"param {err['param']!r}, wanted {param!r}")
    if code is not None:
        expect(err["code"] == code, f"code {err['code']!r}, wanted {code!r}")


MODEL = None
MESSAGES = [{"role": "user", "content": "the cat sees"}]


@check("models lists the served model")
def _():
    global MODEL
    models = client.models.list().data
    expect(len(models) == 1, models)
    MODEL = models[0].id


def chat(stream=False, **kw):
    return client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=stream, **kw)


def usage_ok(u, prompt=None):
    expect(u.total_tokens == u.prompt_tokens + u.completion_tokens, u)
    expect(u.prompt_tokens > 0, u)
    if prompt is not None:
        expect(u.prompt_tokens == prompt, f"prompt_tokens {u.prompt_tokens}, wanted {prompt}")


CHAT = {}


@check("chat, whole: text, finish_reason and usage")
def _():
    r = chat(max_tokens=12, temperature=0)
    c = r.choices[0]
    expect(r.object == "chat.completion" and c.message.role == "assistant", r)
    expect(c.finish_reason in ("stop", "length"), c)
    usage_ok(r.usage)
    if c.finish_reason == "length":
        expect(r.usage.completion_tokens == 12, r.usage)
    CHAT["text"], CHAT["usage"] = c.message.content, r.usage


@check("chat, streamed: the same text and usage, ending with [DONE]")
def _():
    chunks = list(chat(stream=True, max_tokens=12, temperature=0, stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    expect(text == CHAT["text"], f"{text!r} != {CHAT['text']!r}")
    expect(len(finishes) == 1, finishes)
    expect(chunks[-1].choices == [] and chunks[-1].usage is not None, chunks[-1])
    expect(chunks[-1].usage.completion_tokens == CHAT["usage"].completion_tokens, chunks[-1].usage)
    expect(chunks[-1].usage.prompt_tokens == CHAT["usage"].prompt_tokens, chunks[-1].usage)


COMPLETION = {}


@check("completions, whole and streamed, prompt given as token ids")
def _():
    ids = [5, 6, 7, 8, 9, 10, 11]
    r = client.completions.create(model=MODEL, prompt=ids, max_tokens=10, temperature=0)
    expect(r.object == "text_completion", r)
    usage_ok(r.usage, prompt=len(ids))
    expect(r.choices[0].finish_reason != "length" or r.usage.completion_tokens == 10, r)
    streamed = list(client.completions.create(model=MODEL, prompt=ids, max_tokens=10, temperature=0, stream=True,
                                              stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].text for ch in streamed if ch.choices)
    expect(text == r.choices[0].text, f"{text!r} != {r.choices[0].text!r}")
    expect(streamed[-1].usage.completion_tokens == r.usage.completion_tokens, streamed[-1].usage)


@check("completions: default max_tokens is 16, n choices are indexed and seeded")
def _():
    r = client.completions.create(model=MODEL, prompt="the old man", temperature=0)
    expect(r.usage.completion_tokens <= 16, r.usage)
    COMPLETION["text"] = r.choices[0].text
    a = client.completions.create(model=MODEL, prompt="a dog", max_tokens=8, n=3, temperature=1.0, seed=4)
    b = client.completions.create(model=MODEL, prompt="a dog", max_tokens=8, n=3, temperature=1.0, seed=4)
    expect(sorted(c.index for c in a.choices) == [0, 1, 2], a.choices)
    expect([c.text for c in a.choices] == [c.text for c in b.choices], "same seed, other text")
    expect(a.usage.prompt_tokens == b.usage.prompt_tokens, a.usage)


@check("a stop string ends the text before it, finish_reason stop")
def _():
    full = client.completions.create(model=MODEL, prompt="the old man", max_tokens=16, temperature=0).choices[0].text
    expect(len(full) >= 6, f"too short a text to cut: {full!r}")
    stop = full[3:6]
    r = client.completions.create(model=MODEL, prompt="the old man", max_tokens=16, temperature=0, stop=[stop])
    expect(r.choices[0].text == full[:full.find(stop)], f"{r.choices[0].text!r} from {full!r} stop {stop!r}")
    expect(r.choices[0].finish_reason == "stop", r.choices[0])


@check("8 concurrent clients get exactly the tokens each gets alone")
def _():
    jobs = [dict(prompt=p, max_tokens=24, temperature=t, seed=s)
            for p, t, s in [("the cat", 0, 0), ("a dog likes", 0.8, 1), ("my friend", 0, 0), ("the river", 0.9, 2),
                            ("every child finds", 0, 0), ("the moon", 1.0, 3), ("her song", 0, 0),
                            ("the small house", 0.7, 4)]]

    def run(job):
        r = client.completions.create(model=MODEL, **job)
        return r.choices[0].text, r.usage.completion_tokens

    alone = [run(j) for j in jobs]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        together = list(pool.map(run, jobs))
    expect(alone == together, f"alone {alone} together {together}")


@check("malformed JSON: 400 invalid_request_error")
def _():
    expect_error(*raw("POST", "/v1/chat/completions", '{"model": "m", "messages": ['), 400)


@check("an unknown field: 400 naming it")
def _():
    body = json.dumps({"model": MODEL, "messages": MESSAGES, "frobnicate": True})
    expect_error(*raw("POST", "/v1/chat/completions", body), 400, param="frobnicate")


@check("a prompt past the context: 400 context_length_exceeded")
def _():
    body = json.dumps({"model": MODEL, "prompt": [7] * (CONTEXT + 5), "max_tokens": 4})
    expect_error(*raw("POST", "/v1/completions", body), 400, param="prompt", code="context_length_exceeded")


@check("max_tokens past the context: 400 context_length_exceeded")
def _():
    body = json.dumps({"model": MODEL, "messages": MESSAGES, "max_tokens": CONTEXT})
    expect_error(*raw("POST", "/v1/chat/completions", body), 400, param="max_tokens", code="context_length_exceeded")


@check("no API key: 401; unknown route: 404; both JSON errors")
def _():
    expect_error(*raw("GET", "/v1/models", key=None), 401, code="invalid_api_key")
    expect_error(*raw("POST", "/v1/completions", "{}", key="wrong"), 401)
    expect_error(*raw("GET", "/v1/nothing"), 404)


def metrics():
    status, text = raw("GET", "/metrics", key=None)
    expect(status == 200, status)
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


@check("a dropped connection frees its place; the server goes on")
def _():
    before = metrics().get("spillway_client_disconnects_total", 0)
    s = socket.create_connection((URL.hostname, URL.port))
    body = json.dumps({"model": MODEL, "prompt": "the cat", "max_tokens": CONTEXT - 16, "n": 16,
                       "temperature": 1.0, "stream": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: " + str(len(body)).encode() +
              b"\r\n\r\n" + body)
    expect(b"data: " in s.recv(4096) or b"data: " in s.recv(4096), "no event came")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset, as a killed client
    s.close()
    deadline = time.time() + 20
    while time.time() < deadline:
        m = metrics()
        if m["spillway_requests_running"] == 0 and m["spillway_kv_cache_blocks_used"] == 0:
            break
        time.sleep(0.05)
    expect(m["spillway_requests_running"] == 0 and m["spillway_kv_cache_blocks_used"] == 0, m)
    expect(m["spillway_client_disconnects_total"] == before + 1, m)
    expect(m['spillway_sequences_finished_total{reason="cancelled"}'] >= 1, m)
    r = client.completions.create(model=MODEL, prompt="the old man", temperature=0)
    expect(r.choices[0].text == COMPLETION["text"], "the server answers differently after the drop")


@check("health and metrics")
def _():
    status, body = raw("GET", "/health", key=None)
    expect(status == 200 and json.loads(body)["status"] == "ok", body)
    m = metrics()
    expect(m['spillway_http_responses_total{endpoint="/v1/completions",status="200"}'] >= 5, m)
    expect(m["spillway_generation_tokens_total"] > 0 and m["spillway_kv_cache_blocks"] > 0, m)
    expect(any(k.startswith('spillway_decoder_info{decoder="') for k in m), "no decoder_info in /metrics")


failed = [name for name, e in results if e is not None]
print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
sys.exit(1 if failed else 0)
