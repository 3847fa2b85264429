"""`tachyon serve` whose runner fails under a request (TACHYON_RUNNER_FAULT=launch:4, the test-only
switch of docs/testing.md): the client gets status 500 and the OpenAI error object naming the
failure, the server answers /health with 503 while it lasts, and the process exits with status 3
(engine/engine_failure.h: kEngineFailedExitCode) on its own, not by a crash. The in-process
details (streams, 503s, metrics, asynchronous scheduling): tests/server/test_server_engine_failure.cpp.
    python3 engine_failure.py build/bin/tachyon third_party/tokenizers/models
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

tachyon, tokenizers = sys.argv[1], sys.argv[2]
work = tempfile.mkdtemp(prefix="tachyon-engine-failure-")
model = os.path.join(work, "model")
subprocess.run([tachyon, "make-model", "--arch", "qwen3", "--preset", "tiny", "--seed", "3", "--tokenizer",
                os.path.join(tokenizers, "qwen3"), "--out", model], check=True, stdout=subprocess.DEVNULL)
log_path = os.path.join(work, "serve.log")
log = open(log_path, "w")
env = dict(os.environ, TACHYON_RUNNER_FAULT="launch:4")
proc = subprocess.Popen([tachyon, "serve", model, "--device", "cpu", "--port", "0", "--served-model-name", "tiny",
                         "--max-model-len", "512", "--num-blocks", "64"], stdout=log, stderr=subprocess.STDOUT, env=env)
port = None
for _ in range(1200):
    match = re.search(r"serving tiny on http://127\.0\.0\.1:(\d+)", open(log_path).read())
    if match:
        port = int(match.group(1))
        break
    if proc.poll() is not None:
        break
    time.sleep(0.05)
if port is None:
    proc.kill()
    sys.exit("the server did not start:\n" + open(log_path).read())
url = f"http://127.0.0.1:{port}"


def get(path):
    try:
        with urllib.request.urlopen(url + path, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


failures = []
status, _ = get("/health")
if status != 200:
    failures.append(f"/health before the failure: {status}")
request = urllib.request.Request(url + "/v1/completions", method="POST", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"prompt": "Tell me a story", "max_tokens": 32, "ignore_eos": True}).encode())
try:
    with urllib.request.urlopen(request, timeout=60) as r:
        status, body = r.status, json.loads(r.read())
except urllib.error.HTTPError as e:
    status, body = e.code, json.loads(e.read())
message = body.get("error", {}).get("message", "")
if "the engine failed: a runner fault injected by a test at launch 4" not in message:
    failures.append(f"the client did not get the engine's error: {body}")
if status != 500:
    failures.append(f"the request the engine failed under answered {status}, expected 500")
# The server lingers a second after the failure; a probe that still reaches it must see the 503.
try:
    status, text = get("/health")
    if status != 503 or "a runner fault injected by a test" not in text:
        failures.append(f"/health after the failure: {status} {text}")
except (urllib.error.URLError, ConnectionError):
    pass  # already gone: the exit status below is what counts
try:
    code = proc.wait(timeout=60)
except subprocess.TimeoutExpired:
    proc.kill()
    code = "still running after 60 s"
if code != 3:
    failures.append(f"exit status {code}, expected 3")
text = open(log_path).read()
if "the engine failed: a runner fault injected by a test at launch 4" not in text:
    failures.append("the log does not name the failure")
if failures:  # the work folder stays for a look
    sys.exit("\n".join(failures) + "\n--- server log:\n" + text + f"\n--- kept: {work}")
shutil.rmtree(work, ignore_errors=True)
print("ok: the client got the error, the server exited 3")
