"""A stand-in for an SGLang server's start-up: log lines, the ready line, the HTTP checks.

Usage: fake_server.py --port PORT --mode MODE [--fail-first N]

Modes:
  ready      log, serve /health_generate (200) and /get_model_info (JSON), print the ready line
  no-health  print the ready line, but /health_generate answers 503 forever
  flaky      like ready, but /health_generate answers 503 to the first N requests
  bad-info   like ready, but /get_model_info answers plain text
  silent     serve like ready but never print the ready line
  hang       print a few lines, then wait forever without serving
  oom-line   print SGLang's KV-pool error line, then wait forever (as a hung rank would)
  progress   print progress bars redrawn with CR, then the KV-pool error line, then wait
  traceback  print a Python traceback and exit with code 1
  exit0      print a line and exit with code 0
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

READY = "The server is fired up and ready to roll!"


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    sys.stderr.write(f"[{stamp}] {message}\n")
    sys.stderr.flush()


def serve(port: int, mode: str, fail_first: int) -> ThreadingHTTPServer:
    state = {"health_calls": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health_generate":
                with lock:
                    state["health_calls"] += 1
                    calls = state["health_calls"]
                failing = mode == "no-health" or (mode == "flaky" and calls <= fail_first)
                self.reply(503 if failing else 200, b"", "text/plain")
            elif self.path == "/get_model_info":
                if mode == "bad-info":
                    self.reply(200, b"model info", "text/plain")
                else:
                    body = json.dumps({"model_path": "fake/model", "is_generation": True})
                    self.reply(200, body.encode(), "application/json")
            else:
                self.reply(404, b"", "text/plain")

        def reply(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log("INFO:     " + format % args)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--fail-first", type=int, default=3)
    args = parser.parse_args()

    log("Load weight begin. avail mem=21.63 GB")
    if args.mode == "traceback":
        sys.stderr.write("Traceback (most recent call last):\n")
        sys.stderr.write('  File "model_runner.py", line 1, in init\n')
        sys.stderr.write("ValueError: the checkpoint has an unknown layout\n")
        sys.exit(1)
    if args.mode == "exit0":
        print("nothing to do", flush=True)
        return
    if args.mode == "progress":
        for pct in (0, 50, 100):
            sys.stderr.write(f"\rLoading safetensors: {pct}%")
            sys.stderr.flush()
        sys.stderr.write("\n")
    if args.mode in ("oom-line", "progress"):
        log(
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: mem_fraction_static=0.5"
        )
    if args.mode in ("hang", "oom-line", "progress"):
        while True:
            time.sleep(3600)
    serve(args.port, args.mode, args.fail_first)
    log(f"INFO:     Uvicorn running on http://127.0.0.1:{args.port} (Press CTRL+C to quit)")
    if args.mode != "silent":
        log(READY)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
