"""Load generator for `spillway serve` (or any OpenAI-compatible server).

For each concurrency level, that many clients stream completions at once,
each starting its next request when one ends, until every client has sent
--requests-per-stream requests. Reports per level: output tokens/s over the
level's wall time, time to first token and inter-token latency (the gaps
between streamed events) at p50 and p99, as one JSON line on stdout.

    python3 bench/serve_load.py --url http://127.0.0.1:8080 --streams 1,16,64 \
        --prompt-tokens 128 --max-tokens 256

Prompts are random token ids (exactly --prompt-tokens of them, below
--vocab-floor..--vocab-ceiling) so their length does not depend on a
tokenizer; `ignore_eos` keeps every answer at --max-tokens. Standard library only.
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))
    return s[k]


def one_request(url, key, model, prompt, max_tokens, temperature):
    """Streams one completion; returns (ttft_s, [gaps_s], completion_tokens)."""
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": temperature,
                       "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True})
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body, headers=headers)
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read().decode()[:300]}")
    ttft, last, gaps, tokens = None, None, [], 0
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        event = json.loads(data)
        if event.get("usage"):
            tokens = event["usage"]["completion_tokens"]
        if not event.get("choices") or not event["choices"][0].get("text"):
            continue
        now = time.perf_counter()
        if ttft is None:
            ttft = now - start
        else:
            gaps.append(now - last)
        last = now
    conn.close()
    return ttft, gaps, tokens


def run_level(args, url, model, streams):
    rng = random.Random(streams)
    prompts = [[rng.randrange(args.vocab_floor, args.vocab_ceiling) for _ in range(args.prompt_tokens)]
               for _ in range(streams * args.requests_per_stream)]
    lock = threading.Lock()
    ttfts, gaps, tokens, errors = [], [], [0], []

    def client(i):
        for j in range(args.requests_per_stream):
            try:
                t, g, n = one_request(url, args.api_key, model, prompts[i * args.requests_per_stream + j],
                                      args.max_tokens, args.temperature)
            except Exception as e:  # reported in the result line, not fatal
                with lock:
                    errors.append(repr(e))
                continue
            with lock:
                if t is not None:
                    ttfts.append(t)
                gaps.extend(g)
                tokens[0] += n

    threads = [threading.Thread(target=client, args=(i,)) for i in range(streams)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    ms = lambda v: None if v is None else round(v * 1000, 2)
    return {"streams": streams, "requests": streams * args.requests_per_stream, "prompt_tokens": args.prompt_tokens,
            "max_tokens": args.max_tokens, "temperature": args.temperature, "output_tokens": tokens[0], "wall_s": round(wall, 3),
            "output_tok_s": round(tokens[0] / wall, 1) if wall > 0 else None,
            "ttft_p50_ms": ms(percentile(ttfts, 50)), "ttft_p99_ms": ms(percentile(ttfts, 99)),
            "itl_p50_ms": ms(percentile(gaps, 50)), "itl_p99_ms": ms(percentile(gaps, 99)),
            "itl_mean_ms": ms(statistics.fmean(gaps)) if gaps else None, "errors": errors[:5],
            "error_count": len(errors)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--api-key", default="")
    p.add_argument("--streams", default="1,16,64", help="concurrency levels, comma-separated")
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy; above, the server samples")
    p.add_argument("--requests-per-stream", type=int, default=2)
    p.add_argument("--vocab-floor", type=int, default=1000)
    p.add_argument("--vocab-ceiling", type=int, default=20000)
    args = p.parse_args()
    url = urllib.parse.urlparse(args.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("GET", "/v1/models", headers={"Authorization": "Bearer " + args.api_key} if args.api_key else {})
    model = json.loads(conn.getresponse().read())["data"][0]["id"]
    conn.close()
    for level in (int(s) for s in args.streams.split(",")):
        result = run_level(args, url, model, level)
        result["model"] = model
        print(json.dumps(result), flush=True)
        if result["error_count"]:
            print(f"serve_load: {result['error_count']} requests failed, e.g. {result['errors'][0]}", file=sys.stderr)


if __name__ == "__main__":
    main()
